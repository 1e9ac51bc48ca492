// The prefetcher's order detector: accesses that follow an order (each close after an earlier
// one of the same reader, as reader threads interleave) are followed, among random readers too;
// random access is not, and following stops quickly when access turns random.
#include <gtest/gtest.h>

#include <random>

#include "core/prefetcher.h"

using fid::core::OrderDetector;

TEST(OrderDetector, FollowsInOrderAccessAfterEnoughOfIt) {
  OrderDetector d;
  for (uint32_t p = 0; p < OrderDetector::kFollowScore; ++p) EXPECT_FALSE(d.on_access(p, 4)) << p;
  EXPECT_TRUE(d.on_access(OrderDetector::kFollowScore, 4));
  EXPECT_TRUE(d.following());
}

TEST(OrderDetector, FollowsInterleavedReadersWithinTheTolerance) {
  OrderDetector d;
  // Two threads read alternate positions, a little out of step: 1, 0, 3, 2, 5, 4, ...
  for (uint32_t p = 0; p < 40; ++p) d.on_access(p ^ 1u, 4);
  EXPECT_TRUE(d.following());
  // Four ranks on one mount, each reading its own stretch of positions, round robin.
  OrderDetector ranks;
  for (uint32_t i = 0; i < 20; ++i)
    for (uint32_t r = 0; r < 4; ++r) ranks.on_access(r * 1000 + i, 4);
  EXPECT_TRUE(ranks.following());
  OrderDetector narrow;
  for (uint32_t p = 0; p < 80; p += 5) narrow.on_access(p, 4);
  EXPECT_FALSE(narrow.following());
}

TEST(OrderDetector, NeverFollowsRandomAccessAndDropsOutFast) {
  std::mt19937 rng(7);
  OrderDetector d;
  for (int i = 0; i < 10000; ++i) {
    ASSERT_FALSE(d.on_access(static_cast<uint32_t>(rng() % 1000000), 4)) << i;
    ASSERT_FALSE(d.following()) << i;
  }
  for (uint32_t p = 0; p < 40; ++p) d.on_access(p, 4);
  ASSERT_TRUE(d.following());
  // Once access turns random no access is followed, and the detector stops following within
  // kStreams + 1 accesses.
  size_t misses = 0;
  while (d.following()) {
    ASSERT_FALSE(d.on_access(static_cast<uint32_t>(500000 + rng() % 1000000), 4));
    ++misses;
  }
  EXPECT_LE(misses, OrderDetector::kStreams + 1);
}

TEST(OrderDetector, RandomAccessOnASmallStoreRarelyFollows) {
  // 300 positions: random accesses land near some stream's front often, but seldom densely.
  std::mt19937 rng(11);
  OrderDetector d;
  int followed = 0;
  for (int i = 0; i < 100000; ++i) followed += d.on_access(static_cast<uint32_t>(rng() % 300), 4);
  EXPECT_LE(followed, 100) << "of 100000 random accesses";
}

TEST(OrderDetector, FollowsReadersAmongRandomOnes) {
  // Two DataLoader ranks in order, each access of theirs among five random ones (other readers
  // of the mount): both ranks' accesses are followed after a few of them.
  std::mt19937 rng(3);
  OrderDetector d;
  int followed = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    for (uint32_t rank = 0; rank < 2; ++rank) {
      for (int k = 0; k < 5; ++k) d.on_access(static_cast<uint32_t>(rng() % 1000000), 4);
      followed += d.on_access(rank * 2000000 + i, 4);
    }
  }
  EXPECT_GE(followed, 2 * (100 - OrderDetector::kFollowScore));
}
