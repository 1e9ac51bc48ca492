// The inode arithmetic: every kind of node round-trips through its inode, and no two nodes
// share one.
#include <gtest/gtest.h>

#include <set>

#include "core/inodes.h"

using fid::core::InodeMap;
using fid::core::NodeType;

TEST(Inodes, RoundTripAndDisjoint) {
  InodeMap m(4, 6, 10);
  std::set<uint64_t> seen;
  auto check = [&](uint64_t ino, NodeType t, uint32_t id, int view, int level = 0, bool sequential = false) {
    EXPECT_TRUE(seen.insert(ino).second) << ino;
    auto n = m.decode(ino);
    EXPECT_EQ(n.type, t);
    EXPECT_EQ(n.id, id);
    EXPECT_EQ(n.view, view);
    EXPECT_EQ(n.level, level);
    EXPECT_EQ(n.sequential, sequential);
  };
  EXPECT_EQ(m.dir(0), 1u);  // FUSE root
  for (uint32_t d = 0; d < 4; ++d) check(m.dir(d), NodeType::dir, d, 0);
  for (int v = 1; v <= 10; ++v) {
    for (uint32_t d = 0; d < 4; ++d) check(m.dir(d, v), NodeType::dir, d, v);
    for (uint32_t f = 0; f < 6; ++f) check(m.view_file(f, v), NodeType::file, f, v, v);
  }
  // A live file is a different inode at each level and each encoding: its content never changes.
  for (int k = 1; k <= 10; ++k)
    for (uint32_t f = 0; f < 6; ++f) {
      check(m.live_file(f, k), NodeType::file, f, 0, k);
      check(m.live_file(f, k, true), NodeType::file, f, 0, k, true);
    }
  check(m.ctl_root(), NodeType::ctl_root, 0, 0);
  check(m.ctl_sg(), NodeType::ctl_sg, 0, 0);
  check(m.ctl_order(), NodeType::ctl_order, 0, 0);
  for (uint32_t s = 0; s < fid::core::kOrderSlots; ++s) check(m.order_file(s), NodeType::order_file, s, 0);
  EXPECT_EQ(m.order_file(0), m.live_file(5, 10, true) + 1);  // past the live files
  for (uint64_t g : {0ull, 1ull, 1000ull}) {
    auto s = m.decode(m.ctl_snapshot(NodeType::ctl_stats, g));
    EXPECT_EQ(s.type, NodeType::ctl_stats);
    EXPECT_EQ(s.snapshot, g);
    auto c = m.decode(m.ctl_snapshot(NodeType::ctl_config, g));
    EXPECT_EQ(c.type, NodeType::ctl_config);
    EXPECT_EQ(c.snapshot, g);
    auto x = m.decode(m.ctl_snapshot(NodeType::ctl_metrics, g));
    EXPECT_EQ(x.type, NodeType::ctl_metrics);
    EXPECT_EQ(x.snapshot, g);
    EXPECT_TRUE(seen.insert(m.ctl_snapshot(NodeType::ctl_config, g)).second);
    EXPECT_TRUE(seen.insert(m.ctl_snapshot(NodeType::ctl_metrics, g)).second);
    EXPECT_TRUE(seen.insert(m.ctl_snapshot(NodeType::ctl_stats, g)).second);
  }
  EXPECT_EQ(m.ctl_snapshot(NodeType::ctl_stats, 0), m.order_file(fid::core::kOrderSlots - 1) + 1);
  EXPECT_EQ(m.decode(0).type, NodeType::invalid);
  EXPECT_EQ(m.decode(m.ctl_root() + 5).type, NodeType::invalid);
}
