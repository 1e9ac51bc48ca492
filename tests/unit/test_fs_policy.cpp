// Fidelity precedence (file xattr > dir xattr > rule > mount default) and the inode arithmetic.
#include <gtest/gtest.h>

#include <set>

#include "fs/inodes.h"
#include "fs/policy.h"

using fid::fs::InodeMap;
using fid::fs::LevelPolicy;
using fid::fs::LevelSource;
using fid::fs::NodeType;

namespace {

// dirs: 0 root, 1 train (parent 0), 2 train/cat (parent 1), 3 val (parent 0)
// files: 0 in root, 1 in train, 2 in train/cat, 3 in val
LevelPolicy make(std::vector<uint8_t> rules = {}) {
  return LevelPolicy(10, 7, {0, 0, 1, 0}, {0, 1, 2, 3}, std::move(rules));
}

}  // namespace

TEST(Policy, MountDefault) {
  auto p = make();
  LevelSource src;
  for (uint32_t f = 0; f < 4; ++f) {
    EXPECT_EQ(p.effective(f, &src), 7);
    EXPECT_EQ(src, LevelSource::mount);
  }
}

TEST(Policy, RuleBeatsMount) {
  auto p = make({0, 3, 3, 0});
  LevelSource src;
  EXPECT_EQ(p.effective(1, &src), 3);
  EXPECT_EQ(src, LevelSource::rule);
  EXPECT_EQ(p.effective(3, &src), 7);
  EXPECT_EQ(src, LevelSource::mount);
}

TEST(Policy, DirXattrBeatsRuleAndNearestAncestorWins) {
  auto p = make({0, 3, 3, 0});
  ASSERT_TRUE(p.set_dir(1, 5));  // train
  LevelSource src;
  EXPECT_EQ(p.effective(1, &src), 5);
  EXPECT_EQ(src, LevelSource::dir_xattr);
  EXPECT_EQ(p.effective(2), 5);  // train/cat inherits
  EXPECT_EQ(p.effective(3), 7);  // val untouched
  ASSERT_TRUE(p.set_dir(2, 2));  // train/cat: nearer
  EXPECT_EQ(p.effective(2), 2);
  EXPECT_EQ(p.effective(1), 5);
  ASSERT_TRUE(p.set_dir(0, 9));  // root applies to everything without a nearer override
  EXPECT_EQ(p.effective(3), 9);
  EXPECT_EQ(p.effective(0), 9);
  EXPECT_EQ(p.dir_effective(3), 9);
  EXPECT_EQ(p.dir_effective(2), 2);
}

TEST(Policy, FileXattrBeatsEverything) {
  auto p = make({0, 3, 3, 0});
  ASSERT_TRUE(p.set_dir(2, 2));
  ASSERT_TRUE(p.set_file(2, 10));
  LevelSource src;
  EXPECT_EQ(p.effective(2, &src), 10);
  EXPECT_EQ(src, LevelSource::file_xattr);
  // Removal falls back to the next source.
  ASSERT_TRUE(p.set_file(2, std::nullopt));
  EXPECT_EQ(p.effective(2, &src), 2);
  EXPECT_EQ(src, LevelSource::dir_xattr);
  ASSERT_TRUE(p.set_dir(2, std::nullopt));
  EXPECT_EQ(p.effective(2, &src), 3);
  EXPECT_EQ(src, LevelSource::rule);
  EXPECT_FALSE(p.set_dir(2, std::nullopt));  // nothing to remove
  EXPECT_FALSE(p.set_file(2, std::nullopt));
  EXPECT_EQ(p.override_count(), 0u);
}

TEST(Policy, RejectsBadLevelsAndIds) {
  auto p = make();
  EXPECT_FALSE(p.set_file(0, 0));
  EXPECT_FALSE(p.set_file(0, 11));
  EXPECT_FALSE(p.set_file(99, 3));
  EXPECT_FALSE(p.set_dir(99, 3));
  EXPECT_EQ(p.effective(0), 7);
  EXPECT_TRUE(p.in_subtree(2, 1));
  EXPECT_TRUE(p.in_subtree(2, 0));
  EXPECT_FALSE(p.in_subtree(3, 1));
}

TEST(Inodes, RoundTripAndDisjoint) {
  InodeMap m(4, 6, 10);
  std::set<uint64_t> seen;
  auto check = [&](uint64_t ino, NodeType t, uint32_t id, int view, int level = 0) {
    EXPECT_TRUE(seen.insert(ino).second) << ino;
    auto n = m.decode(ino);
    EXPECT_EQ(n.type, t);
    EXPECT_EQ(n.id, id);
    EXPECT_EQ(n.view, view);
    EXPECT_EQ(n.level, level);
  };
  EXPECT_EQ(m.dir(0), 1u);  // FUSE root
  for (uint32_t d = 0; d < 4; ++d) check(m.dir(d), NodeType::dir, d, 0);
  for (int v = 1; v <= 10; ++v) {
    for (uint32_t d = 0; d < 4; ++d) check(m.dir(d, v), NodeType::dir, d, v);
    for (uint32_t f = 0; f < 6; ++f) check(m.view_file(f, v), NodeType::file, f, v, v);
  }
  // A live file is a different inode at each level: its content never changes.
  for (int k = 1; k <= 10; ++k)
    for (uint32_t f = 0; f < 6; ++f) check(m.live_file(f, k), NodeType::file, f, 0, k);
  check(m.ctl_root(), NodeType::ctl_root, 0, 0);
  check(m.ctl_sg(), NodeType::ctl_sg, 0, 0);
  check(m.ctl_order(), NodeType::ctl_order, 0, 0);
  for (uint32_t s = 0; s < fid::fs::kOrderSlots; ++s) check(m.order_file(s), NodeType::order_file, s, 0);
  EXPECT_EQ(m.order_file(0), m.live_file(5, 10) + 1);  // past the live files
  for (uint64_t g : {0ull, 1ull, 1000ull}) {
    auto s = m.decode(m.ctl_snapshot(NodeType::ctl_stats, g));
    EXPECT_EQ(s.type, NodeType::ctl_stats);
    EXPECT_EQ(s.snapshot, g);
    auto c = m.decode(m.ctl_snapshot(NodeType::ctl_config, g));
    EXPECT_EQ(c.type, NodeType::ctl_config);
    EXPECT_EQ(c.snapshot, g);
    EXPECT_TRUE(seen.insert(m.ctl_snapshot(NodeType::ctl_stats, g)).second);
  }
  EXPECT_EQ(m.ctl_snapshot(NodeType::ctl_stats, 0), m.order_file(fid::fs::kOrderSlots - 1) + 1);
  EXPECT_EQ(m.decode(0).type, NodeType::invalid);
  EXPECT_EQ(m.decode(m.ctl_root() + 5).type, NodeType::invalid);
}
