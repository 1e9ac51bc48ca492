#include <gtest/gtest.h>

#include "core/orders.h"

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
  uint32_t a = slots.acquire({0, 0, 1}, &g0);
  EXPECT_EQ(slots.acquire({0, 0, 1}, &g), a);
  EXPECT_EQ(g, g0);
  uint32_t b = slots.acquire({1, 0, 1}, nullptr);
  uint32_t c = slots.acquire({2, 0, 1}, nullptr);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  slots.acquire({0, 0, 1}, nullptr);         // a is now the most recent; b the least
  uint32_t d = slots.acquire({3, 0, 1}, &g);  // reuses b's slot with a new generation
  EXPECT_EQ(d, b);
  EXPECT_GT(g, g0);
  EXPECT_EQ(*slots.name_of(d), (OrderName{3, 0, 1}));
  EXPECT_EQ(*slots.name_of(a), (OrderName{0, 0, 1}));
  EXPECT_FALSE(slots.name_of(99));
}
