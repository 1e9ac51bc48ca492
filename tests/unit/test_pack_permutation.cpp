#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "pack/packer.h"

using fid::pack::storage_permutation;

TEST(StoragePermutation, IsAPermutationAndDeterministic) {
  for (uint32_t n : {0u, 1u, 2u, 7u, 1000u}) {
    auto p = storage_permutation(n, 42);
    ASSERT_EQ(p.size(), n);
    auto sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint32_t> expect(n);
    std::iota(expect.begin(), expect.end(), 0u);
    EXPECT_EQ(sorted, expect);
    EXPECT_EQ(p, storage_permutation(n, 42));
  }
}

TEST(StoragePermutation, SeedChangesOrderAndMixes) {
  auto a = storage_permutation(1000, 1), b = storage_permutation(1000, 2);
  EXPECT_NE(a, b);
  // A class-sorted tree (10 classes of 100) must be mixed: the first 100 stored files should
  // span most classes, not one.
  std::vector<bool> seen(10, false);
  for (int i = 0; i < 100; ++i) seen[a[static_cast<size_t>(i)] / 100] = true;
  EXPECT_GE(std::count(seen.begin(), seen.end(), true), 9);
}

TEST(StoragePermutation, FixedValuesDocumentedInFormat) {
  // docs/FORMAT.md gives this example so a second implementation can check itself.
  auto p = storage_permutation(8, 0);
  std::string s;
  for (auto v : p) s += std::to_string(v) + " ";
  RecordProperty("perm8_seed0", s);
  EXPECT_EQ(p.size(), 8u);
}
