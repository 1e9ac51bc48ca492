#include <gtest/gtest.h>

#include <algorithm>

#include "core/orders.h"
#include "core/prefetcher.h"
#include "index/order.h"
#include "test_store_fixture.h"

using fid::core::OrderName;
using fid::core::OrderSlots;
using fid::core::order_file_name;
using fid::core::parse_order_name;

TEST(OrderNames, ParseAndFormat) {
  auto n = parse_order_name("epoch-0");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, (OrderName{0, 0, 1}));
  n = parse_order_name("epoch-12.rank-3-of-8");
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, (OrderName{12, 3, 8}));
  EXPECT_EQ(order_file_name(*n), "epoch-12.rank-3-of-8");
  EXPECT_EQ(order_file_name(OrderName{7, 0, 1}), "epoch-7");
  EXPECT_TRUE(parse_order_name("epoch-18446744073709551615"));
  EXPECT_TRUE(parse_order_name("epoch-1.rank-0-of-1"));  // a world of one
  for (const char* bad : {"", "epoch", "epoch-", "epoch-01", "epoch-+1", "epoch--1", "epoch-1x", "epoch-1.",
                          "epoch-1.rank-1-of-1", "epoch-1.rank-0-of-0", "epoch-1.rank-01-of-2", "epoch-1.rank-1",
                          "epoch-1.rank-1-of-", "epoch-1.rank--of-2", "epoch-18446744073709551616",
                          "epoch-1.rank-0-of-4294967296", "EPOCH-1", "epoch-1.rank-0-of-2.x", " epoch-1"})
    EXPECT_FALSE(parse_order_name(bad)) << bad;
}

TEST(OrderSlots, KeepsNamesAndReusesLeastRecent) {
  OrderSlots slots(3);
  uint64_t g0 = 0, g = 0;
  uint32_t a = slots.acquire({{0, 0, 1}, 7}, &g0);
  EXPECT_EQ(slots.acquire({{0, 0, 1}, 7}, &g), a);
  EXPECT_EQ(g, g0);
  uint32_t b = slots.acquire({{1, 0, 1}, 7}, nullptr);
  uint32_t c = slots.acquire({{0, 0, 1}, 8}, nullptr);  // the same name under another seed: its own slot
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  slots.acquire({{0, 0, 1}, 7}, nullptr);            // a is now the most recent; b the least
  uint32_t d = slots.acquire({{3, 0, 1}, 7}, &g);  // reuses b's slot with a new generation
  EXPECT_EQ(d, b);
  EXPECT_GT(g, g0);
  EXPECT_EQ(*slots.held(d), (OrderSlots::Held{{3, 0, 1}, 7}));
  EXPECT_EQ(*slots.held(a), (OrderSlots::Held{{0, 0, 1}, 7}));
  EXPECT_EQ(*slots.held(c), (OrderSlots::Held{{0, 0, 1}, 8}));
  EXPECT_FALSE(slots.held(99));
}

// The prefetcher's index of an epoch's rank orders: the ranks' orders end to end, each rank's
// records one segment, and a rank's reads (alone or interleaved with another rank's on the same
// mount) look in order to the detector.
class OrderIndexTest : public fid::testutil::PackedStore {};

TEST_F(OrderIndexTest, LaysRankOrdersEndToEndOneSegmentPerRank) {
  const auto& s = store();
  const auto files = s.files();
  for (uint32_t world : {1u, 2u, 3u}) {
    SCOPED_TRACE(world);
    fid::index::OrderParams p{9, 2, 0, world, 2};
    auto ix = fid::core::build_order_index(s, p);
    EXPECT_EQ(ix->world, world);
    const auto orders = fid::index::epoch_rank_orders(s, p);
    uint32_t next = 0;
    size_t seg_begin = 0;
    for (size_t r = 0; r < orders.size(); ++r) {
      for (uint32_t f : orders[r]) EXPECT_EQ(ix->pos[f], next++);
      // This rank's records: rec_seq[seg_begin, seg_end), all of them its own.
      ASSERT_LT(seg_begin, ix->rec_seq.size());
      const size_t seg_end = ix->seg_end[seg_begin];
      for (size_t j = seg_begin; j < seg_end; ++j) {
        EXPECT_EQ(ix->seg_end[j], seg_end);
        const uint32_t rec = ix->rec_seq[j];
        EXPECT_EQ(ix->rec_index[rec], j);
        EXPECT_TRUE(std::any_of(orders[r].begin(), orders[r].end(), [&](uint32_t f) { return files[f].record == rec; }));
        EXPECT_GE(ix->last_pos[j], ix->pos[orders[r].front()]);
        EXPECT_LE(ix->last_pos[j], ix->pos[orders[r].back()]);
      }
      seg_begin = seg_end;
    }
    EXPECT_EQ(next, files.size());
    EXPECT_EQ(seg_begin, ix->rec_seq.size());
  }
}

TEST_F(OrderIndexTest, DetectorFollowsRanksSharingAMount) {
  const auto& s = store();
  fid::index::OrderParams p{9, 2, 0, 2, 2};
  auto ix = fid::core::build_order_index(s, p);
  std::vector<std::vector<uint32_t>> orders;
  for (uint32_t r = 0; r < 2; ++r) {
    p.rank = r;
    orders.push_back(fid::index::epoch_order(s, p));  // padded, as the ranks read them
  }
  ASSERT_GE(orders[0].size(), 8u);
  fid::core::OrderDetector alone, shared;
  bool alone_followed = false, shared_followed = false;
  for (uint32_t f : orders[1]) alone_followed |= alone.on_access(ix->pos[f], 4);
  for (size_t i = 0; i < orders[0].size(); ++i)
    for (const auto& order : orders) shared_followed |= shared.on_access(ix->pos[order[i]], 4);
  EXPECT_TRUE(alone_followed);
  EXPECT_TRUE(shared_followed);
}

// A reader may try any number of order names (any user of an allow_other mount can look up
// /.fidelity/order/epoch-N.rank-R-of-W for every N, R and W): the slots and the generated texts
// stay bounded, and a huge world costs no more than a world of as many ranks as records.
TEST_F(OrderIndexTest, ManyOrderNamesKeepTheTablesBounded) {
  const auto& s = store();
  fid::core::OrderContents contents(s, 4);
  const auto order = [](const OrderName& n) { return fid::index::OrderParams{5, n.epoch, n.rank, n.world, 2}; };
  OrderSlots slots(256);
  uint32_t names = 0;
  for (uint64_t epoch = 0; epoch < 40; ++epoch)
    for (uint32_t world : {1u, 2u, 7u, 1000u, 4294967295u})
      for (uint32_t rank : {0u, 1u, world / 2, world - 1}) {
        if (rank >= world) continue;
        const OrderName name{epoch * 1000003, rank, world};
        slots.acquire({name, 5}, nullptr);
        auto text = contents.get(order(name));
        ASSERT_NE(text, nullptr);
        ASSERT_FALSE(text->empty());
        ASSERT_LE(contents.cached(), 4u);
        ++names;
      }
  EXPECT_GT(names, 500u);
  EXPECT_EQ(slots.size(), 256u);
  // The last rank of the largest world reads a rank's share of the store, like any other rank.
  const OrderName huge{0, 4294967294u, 4294967295u};
  const auto text = contents.get(order(huge));
  const size_t lines = static_cast<size_t>(std::count(text->begin(), text->end(), '\n'));
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, s.files().size());
  auto ix = fid::core::build_order_index(s, order(huge));
  EXPECT_EQ(ix->pos.size(), s.files().size());
  EXPECT_LE(ix->rec_seq.size(), s.records().size());
  EXPECT_LE(ix->seg_end.size(), s.records().size());
}
