// The cache of rendered L3 views: a reader of many distinct views (any user of an allow_other
// mount can open every file, under every /.fidelity/sg/K/) keeps it within its budget, counting
// each view's fixed overhead, so that tiny views cannot grow it without bound either.
#include <gtest/gtest.h>

#include <cstring>

#include "core/view_cache.h"

using fid::codec::HostBuffer;
using fid::core::ViewCache;

namespace {

ViewCache::View view_of(size_t bytes, uint8_t fill) {
  auto v = HostBuffer::heap(bytes);
  std::memset(v->data(), fill, bytes);
  return v;
}

TEST(ViewCache, ManyTinyViewsStayWithinTheBudget) {
  constexpr uint64_t kBudget = 64 << 10;
  ViewCache cache(kBudget);
  constexpr uint32_t kFiles = 100000;
  for (uint32_t f = 0; f < kFiles; ++f) {
    ViewCache::View v = cache.get(f, [&] { return view_of(8, static_cast<uint8_t>(f)); });
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->data()[0], static_cast<uint8_t>(f));
    ASSERT_LE(cache.used(), kBudget);
  }
  EXPECT_EQ(cache.renders(), kFiles);
  EXPECT_LE(cache.entries(), kBudget / ViewCache::kEntryOverhead);
  EXPECT_GE(cache.entries(), kBudget / (ViewCache::kEntryOverhead + 8) - 1);  // and it still caches
  // The most recent views are the ones kept: read again without rendering.
  const uint64_t renders = cache.renders();
  ViewCache::View last = cache.get(kFiles - 1, [] { return view_of(8, 0); });
  EXPECT_EQ(last->data()[0], static_cast<uint8_t>(kFiles - 1));
  EXPECT_EQ(cache.renders(), renders);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(ViewCache, AViewLargerThanTheBudgetIsTheOnlyOneKept) {
  ViewCache cache(1 << 10);
  cache.get(1, [] { return view_of(100, 1); });
  cache.get(2, [] { return view_of(4 << 10, 2); });
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.used(), (4u << 10) + ViewCache::kEntryOverhead);
  cache.get(2, [] { return view_of(4 << 10, 0); });  // kept: not rendered again
  EXPECT_EQ(cache.renders(), 2u);
}

TEST(ViewCache, AFailedRenderIsNotKept) {
  ViewCache cache(1 << 20);
  EXPECT_EQ(cache.get(7, [] { return ViewCache::View(); }), nullptr);
  // A render that throws: the exception reaches the caller (the adapter answers ENOMEM or EIO) and
  // nothing stays pending for the next reader.
  EXPECT_THROW(cache.get(8, []() -> ViewCache::View { throw std::runtime_error("decode"); }), std::runtime_error);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.used(), 0u);
  EXPECT_EQ(cache.get(7, [] { return view_of(3, 7); })->data()[0], 7);
}

}  // namespace
