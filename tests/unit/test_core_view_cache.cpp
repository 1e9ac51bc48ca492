// The cache of rendered L3 views: a reader of many distinct views (any user of an allow_other
// mount can open every file, under every /.fidelity/sg/K/) keeps it within its budget, counting
// each view's fixed overhead, so that tiny views cannot grow it without bound either.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <latch>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/view_cache.h"

using fid::codec::HostBuffer;
using fid::core::ViewCache;

namespace {

// The view a get returned (null if it failed).
ViewCache::View got(const fid::Result<ViewCache::View>& r) { return r.ok() ? *r : nullptr; }

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
    ViewCache::View v = got(cache.get(f, 8, [&] { return view_of(8, static_cast<uint8_t>(f)); }));
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->data()[0], static_cast<uint8_t>(f));
    ASSERT_LE(cache.used(), kBudget);
  }
  EXPECT_EQ(cache.renders(), kFiles);
  EXPECT_LE(cache.entries(), kBudget / ViewCache::kEntryOverhead);
  EXPECT_GE(cache.entries(), kBudget / (ViewCache::kEntryOverhead + 8) - 1);  // and it still caches
  // The most recent views are the ones kept: read again without rendering.
  const uint64_t renders = cache.renders();
  ViewCache::View last = got(cache.get(kFiles - 1, 8, [] { return view_of(8, 0); }));
  EXPECT_EQ(last->data()[0], static_cast<uint8_t>(kFiles - 1));
  EXPECT_EQ(cache.renders(), renders);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(ViewCache, AViewLargerThanTheBudgetIsTheOnlyOneKept) {
  ViewCache cache(1 << 10);
  (void)cache.get(1, 100, [] { return view_of(100, 1); });
  (void)cache.get(2, 4 << 10, [] { return view_of(4 << 10, 2); });
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.used(), (4u << 10) + ViewCache::kEntryOverhead);
  (void)cache.get(2, 4 << 10, [] { return view_of(4 << 10, 0); });  // kept: not rendered again
  EXPECT_EQ(cache.renders(), 2u);
}

TEST(ViewCache, AFailedRenderIsNotKept) {
  ViewCache cache(1 << 20);
  EXPECT_EQ(cache.get(7, 0, [] { return ViewCache::View(); }).error().code, EIO);
  // A render that throws: the caller gets the cause as an Error (ENOMEM when memory ran out) and
  // nothing stays pending for the next reader.
  const auto thrown = cache.get(8, 100, []() -> fid::Result<ViewCache::View> { throw std::runtime_error("decode"); });
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.error().code, EIO);
  EXPECT_NE(thrown.error().message.find("decode"), std::string::npos);
  EXPECT_EQ(cache.get(9, 100, []() -> fid::Result<ViewCache::View> { throw std::bad_alloc(); }).error().code, ENOMEM);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.used(), 0u);
  EXPECT_EQ(got(cache.get(7, 3, [] { return view_of(3, 7); }))->data()[0], 7);
}

// Sixteen views rendered at once under a budget of sixteen: each counts its expected bytes from
// its start, so when they finish they evict the views no one reads any more, never each other.
TEST(ViewCache, ViewsRenderedAtOnceNeverEvictEachOther) {
  constexpr uint64_t kView = 100 << 10, kAtOnce = 16;
  ViewCache cache(kAtOnce * (kView + ViewCache::kEntryOverhead));
  for (uint64_t old = 100; old < 104; ++old) (void)cache.get(old, kView, [] { return view_of(kView, 0); });
  std::latch all_started(kAtOnce);
  std::vector<std::thread> readers;
  for (uint64_t k = 0; k < kAtOnce; ++k)
    readers.emplace_back([&, k] {
      (void)cache.get(k, kView, [&] {
        all_started.arrive_and_wait();  // every render in flight before any finishes
        return view_of(kView, static_cast<uint8_t>(k));
      });
    });
  for (auto& t : readers) t.join();
  EXPECT_EQ(cache.renders(), 4 + kAtOnce);
  for (uint64_t k = 0; k < kAtOnce; ++k)
    EXPECT_EQ(got(cache.get(k, kView, [] { return view_of(kView, 0xFF); }))->data()[0], k) << k;
  EXPECT_EQ(cache.renders(), 4 + kAtOnce);  // all sixteen still there
  EXPECT_EQ(cache.entries(), kAtOnce);      // the old views made the room
  EXPECT_LE(cache.used(), cache.budget());
}

// Views of readers between two requests outlast views read to their end, even older ones.
TEST(ViewCache, AViewReadToItsEndGoesFirst) {
  constexpr uint64_t kView = 100 << 10;
  ViewCache cache(3 * (kView + ViewCache::kEntryOverhead));
  (void)cache.get(1, kView, [] { return view_of(kView, 1); });  // a reader is in it
  (void)cache.get(2, kView, [] { return view_of(kView, 2); });
  (void)cache.get(3, kView, [] { return view_of(kView, 3); });
  cache.read_to_end(3);
  (void)cache.get(4, kView, [] { return view_of(kView, 4); });  // room for it: 3 goes, not 1
  EXPECT_EQ(got(cache.get(1, kView, [] { return view_of(kView, 0xFF); }))->data()[0], 1);
  EXPECT_EQ(cache.renders(), 4u);
  EXPECT_EQ(got(cache.get(3, kView, [] { return view_of(kView, 0xFF); }))->data()[0], 0xFF);  // rendered again
}

}  // namespace
