// Fidelity precedence: file xattr > dir xattr > rule > mount default.
#include <gtest/gtest.h>

#include "core/level_policy.h"

using fid::core::LevelPolicy;

namespace {

// dirs: 0 root, 1 train (parent 0), 2 train/cat (parent 1), 3 val (parent 0)
// files: 0 in root, 1 in train, 2 in train/cat, 3 in val
LevelPolicy make(std::vector<uint8_t> rules = {}) {
  return LevelPolicy(10, 7, {0, 0, 1, 0}, {0, 1, 2, 3}, std::move(rules));
}

}  // namespace

TEST(Policy, MountDefault) {
  auto p = make();
  for (uint32_t f = 0; f < 4; ++f) {
    EXPECT_EQ(p.effective(f), 7);
  }
}

TEST(Policy, RuleBeatsMount) {
  auto p = make({0, 3, 3, 0});
  EXPECT_EQ(p.effective(1), 3);
  EXPECT_EQ(p.effective(3), 7);
}

TEST(Policy, DirXattrBeatsRuleAndNearestAncestorWins) {
  auto p = make({0, 3, 3, 0});
  ASSERT_TRUE(p.set_dir(1, 5));  // train
  EXPECT_EQ(p.effective(1), 5);
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
  EXPECT_EQ(p.effective(2), 10);
  // Removal falls back to the next source.
  ASSERT_TRUE(p.set_file(2, std::nullopt));
  EXPECT_EQ(p.effective(2), 2);
  ASSERT_TRUE(p.set_dir(2, std::nullopt));
  EXPECT_EQ(p.effective(2), 3);
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
