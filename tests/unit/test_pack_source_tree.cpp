// The tree building that the tar and remote sources share, and the compact listings (PathListing).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sources/pack_source.h"

using fid::sources::SourceTreeBuilder;

TEST(SourceTreeBuilder, FoldersBeforeChildrenAndRefusals) {
  SourceTreeBuilder b(7);
  ASSERT_TRUE(b.add_dir("", 9, 1));
  ASSERT_TRUE(b.add_file("a/b/c.jpg", 10, 1));
  ASSERT_TRUE(b.add_dir("a/d", 5, 1));
  ASSERT_TRUE(b.add_skipped("a/d/odd", "why", 1));
  ASSERT_TRUE(b.add_file(".fidelity/x", 1, 1));
  ASSERT_TRUE(b.add_file(std::string(256, 'n'), 1, 1));
  fid::sources::SourceTree t = b.take();
  ASSERT_EQ(t.dirs.size(), 4u);  // root, a, a/b, a/d
  EXPECT_EQ(t.dirs[0].mtime_ns, 9);
  EXPECT_EQ(t.dirs[2].rel, "a/b");
  EXPECT_EQ(t.dirs[3].mtime_ns, 5);
  ASSERT_EQ(t.files.size(), 1u);
  EXPECT_EQ(t.rel(0), "a/b/c.jpg");
  ASSERT_EQ(t.skipped.size(), 3u);  // a/d/odd, .fidelity, the long name

  SourceTreeBuilder dup(0);
  ASSERT_TRUE(dup.add_file("a", 1, 0));
  EXPECT_EQ(dup.add_file("a", 1, 0).error().code, EEXIST);
  SourceTreeBuilder both(0);
  ASSERT_TRUE(both.add_file("a", 1, 0));
  EXPECT_EQ(both.add_file("a/b", 1, 0).error().code, EEXIST);
  EXPECT_EQ(*fid::sources::normalize_source_path("./a//b/."), "a/b");
  EXPECT_FALSE(fid::sources::normalize_source_path("a/../b"));
  EXPECT_FALSE(fid::sources::normalize_source_path("/a"));
}

TEST(PathListing, SortsInWalkOrderStablyAndFindsPaths) {
  struct Info {
    uint32_t n;
  };
  fid::sources::PathListing<Info> l;
  // "a/b" sorts before "a-b" in walk order ('/' below every byte), after it bytewise.
  ASSERT_TRUE(l.add({0}, "a-b"));
  ASSERT_TRUE(l.add({1}, "a/b", "key of a/b"));
  ASSERT_TRUE(l.add({2}, "a-b", "second a-b"));
  ASSERT_TRUE(l.add({3}, "a"));
  EXPECT_FALSE(l.add({4}, std::string(4097, 'x')));
  EXPECT_FALSE(l.add({5}, "ok", std::string(4097, 'x')));
  ASSERT_EQ(l.size(), 4u);
  l.sort();
  std::vector<uint32_t> order;
  for (size_t k = 0; k < l.size(); ++k) order.push_back(l[k].info.n);
  EXPECT_EQ(order, (std::vector<uint32_t>{3, 1, 0, 2}));
  EXPECT_EQ(l[1].path, "a/b");
  EXPECT_EQ(l[1].extra, "key of a/b");
  EXPECT_EQ(l[2].extra, "");
  EXPECT_EQ(l[3].extra, "second a-b");
  EXPECT_EQ(l.lower_bound("a-b"), 2u);
  EXPECT_EQ(l.lower_bound("a/a"), 1u);
  EXPECT_EQ(l.lower_bound("b"), 4u);

  // Entries span many pool chunks (64 KiB each) and stay intact.
  fid::sources::PathListing<Info> big;
  const std::string name(3000, 'n');
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_TRUE(big.add({i}, name + std::to_string(1000 + 999 - i), name));
  big.sort();
  for (size_t k = 0; k < big.size(); ++k) {
    EXPECT_EQ(big[k].info.n, 999 - k);
    EXPECT_TRUE(big[k].extra == name) << k;
  }
  // drain() hands out every entry in order (chunks are given back behind it), stops at the
  // first error, and leaves the listing empty.
  uint32_t next = 999;
  EXPECT_TRUE(big.drain([&](const fid::sources::PathListing<Info>::Entry& e) -> fid::Status {
    EXPECT_EQ(e.info.n, next--);
    EXPECT_TRUE(e.path == name + std::to_string(1999 - e.info.n)) << e.info.n;
    return {};
  }));
  EXPECT_EQ(next, UINT32_MAX);
  EXPECT_EQ(big.size(), 0u);
  int seen = 0;
  fid::Status stopped = l.drain([&](const fid::sources::PathListing<Info>::Entry& e) -> fid::Status {
    ++seen;
    if (e.path == "a/b") return fid::Error{EEXIST, "stop"};
    return {};
  });
  EXPECT_EQ(stopped.error().code, EEXIST);
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(l.size(), 0u);
}
