// RecordCache: the byte budget is never exceeded (held prefixes count until let go), readers wait
// for a load in flight instead of reading storage themselves, a prefix a reader holds stays
// intact while the cache evicts around it, a prefix's damaged piece is found at load, and a
// level raised on a cached prefix fetches only the missing tail.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/prefetcher.h"
#include "core/record_cache.h"
#include "counting_source.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

using fid::core::Prefix;
using fid::core::ReadStats;
using fid::core::RecordCache;
using fid::storage::LocalRecordSource;
using fid::storage::PrefixRead;
using fid::storage::RangeRead;
using fid::storage::RecordSource;
using fid::testutil::GatedSource;

namespace {

class RecordCacheTest : public fid::testutil::PackedStore {};

TEST_F(RecordCacheTest, BudgetIsNeverExceeded) {
  LocalRecordSource source(store());
  ReadStats stats;
  // Room for about two full records: loading all of them in turn must evict.
  const uint64_t budget = 2 * (16 << 10) + 8192;
  RecordCache cache(store(), source, stats, budget);
  std::vector<std::shared_ptr<const Prefix>> held;
  for (int round = 0; round < 3; ++round) {
    for (const auto& r : store().records()) {
      const bool loaded = cache.load(r.id, cache.prefix_level(r.id, store().levels()), false);
      EXPECT_LE(cache.used(), budget);
      if (loaded && round == 1 && held.empty()) held.push_back(cache.get(r.id, 0));  // one held a while
      if (round == 2) held.clear();
    }
  }
  EXPECT_LE(cache.peak(), budget);
  EXPECT_GT(stats.cache_evictions.load(), 0u);
  // A prefix larger than the whole budget is refused, not squeezed in.
  RecordCache tiny(store(), source, stats, 4096);
  EXPECT_FALSE(tiny.load(0, store().levels(), false));
  EXPECT_EQ(tiny.used(), 0u);
}

TEST_F(RecordCacheTest, ReadersWaitForALoadInFlight) {
  LocalRecordSource local(store());
  GatedSource gated(local);
  ReadStats stats;
  RecordCache cache(store(), gated, stats, 16 << 20);
  const uint32_t r = 0;
  const int level = cache.prefix_level(r, 5);
  ASSERT_TRUE(cache.mark_queued(r, level));
  std::thread loader([&] { cache.load(r, level, true); });
  gated.wait_for_reader();  // the load is in flight, blocked in storage
  auto reader = std::async(std::launch::async, [&] { return cache.get(r, level); });
  // The load is let go only once the reader waits for it (however long a loaded machine takes to
  // get it there), so that the read counts as a wait.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cache.waiting() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(cache.waiting(), 1u) << "the reader never waited for the load";
  EXPECT_EQ(reader.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);  // it waits
  gated.open();
  auto p = reader.get();
  loader.join();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->level, level);
  EXPECT_EQ(stats.prefetch_waits.load(), 1u);
  EXPECT_EQ(stats.prefetch_hits.load(), 1u);
  EXPECT_EQ(stats.records_read.load(), 1u);
  // A queued mark that will not be loaded releases its waiters: they read their own pieces.
  ASSERT_TRUE(cache.mark_queued(1, level));
  auto other = std::async(std::launch::async, [&] { return cache.get(1, level); });
  cache.unqueue(1);
  EXPECT_EQ(other.get(), nullptr);
}

TEST_F(RecordCacheTest, AHeldPrefixStaysIntactWhileOthersAreEvicted) {
  LocalRecordSource source(store());
  ReadStats stats;
  const uint64_t budget = 3 * (16 << 10);
  RecordCache cache(store(), source, stats, budget);
  ASSERT_TRUE(cache.load(0, 0, false));
  std::shared_ptr<const Prefix> held = cache.get(0, 0);
  ASSERT_NE(held, nullptr);
  const std::vector<uint8_t> before(held->data, held->data + held->len);
  for (int round = 0; round < 3; ++round)
    for (const auto& r : store().records())
      if (r.id != 0) cache.load(r.id, 0, false);
  EXPECT_GT(stats.cache_evictions.load(), 0u);
  EXPECT_EQ(std::vector<uint8_t>(held->data, held->data + held->len), before);  // still mapped, unchanged
  EXPECT_LE(cache.peak(), budget);  // its bytes were counted all along
  const uint64_t used = cache.used();
  held.reset();
  EXPECT_LE(cache.used(), used);
}

TEST_F(RecordCacheTest, DamagedPiecesAreFoundWhenThePrefixLoads) {
  const auto& victim = jpeg_with(4);
  const auto& p = store().pieces(victim)[2];
  fid::testutil::flip_byte(path() / store().records()[victim.record].path, p.offset + 1);
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache cache(store(), source, stats, 16 << 20);
  ASSERT_TRUE(cache.load(victim.record, 1, false));
  auto low = cache.get(victim.record, 1);
  EXPECT_TRUE(low->bad_pieces.empty());  // level 1 ends before piece 2
  ASSERT_TRUE(cache.load(victim.record, store().levels(), false));
  auto full = cache.get(victim.record, store().levels());
  ASSERT_EQ(full->bad_pieces.size(), 1u);
  EXPECT_TRUE(full->is_bad(victim.id, 2));
  EXPECT_FALSE(full->is_bad(victim.id, 1));
}

// A prefix with damaged pieces is kept for its good pieces while its back-off lasts, then dropped,
// so that the next load reads the record again: a flipped byte that has been repaired is forgotten.
TEST_F(RecordCacheTest, ADamagedPrefixIsFetchedAgainOnceItsBackoffHasPassed) {
  const auto& victim = jpeg_with(4);
  const auto& p = store().pieces(victim)[2];
  const auto file = path() / store().records()[victim.record].path;
  const int L = store().levels();
  fid::testutil::flip_byte(file, p.offset + 1);
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache kept(store(), source, stats, 16 << 20);
  ASSERT_TRUE(kept.load(victim.record, L, false));
  ASSERT_TRUE(kept.get(victim.record, L)->is_bad(victim.id, 2));
  EXPECT_NE(kept.get(victim.record, L), nullptr) << "kept while the back-off (1 s) lasts";
  RecordCache cache(store(), source, stats, 16 << 20);
  cache.set_damage_backoff_for_tests(std::chrono::milliseconds(0));
  ASSERT_TRUE(cache.load(victim.record, L, false));
  EXPECT_EQ(cache.get(victim.record, L), nullptr) << "dropped once the back-off has passed";
  fid::testutil::flip_byte(file, p.offset + 1);  // repaired
  ASSERT_TRUE(cache.load(victim.record, L, false));
  auto clean = cache.get(victim.record, L);
  ASSERT_NE(clean, nullptr);
  EXPECT_TRUE(clean->bad_pieces.empty());
  EXPECT_EQ(stats.records_read.load(), 3u);
}

TEST_F(RecordCacheTest, ARaisedLevelFetchesOnlyTheTail) {
  LocalRecordSource local(store());
  fid::testutil::CountingSource counting(local);
  ReadStats stats;
  RecordCache cache(store(), counting, stats, 16 << 20);
  const auto& victim = jpeg_with(4);
  const uint32_t r = victim.record;
  const uint64_t low = cache.prefix_len(r, 1), high = cache.prefix_len(r, store().levels());
  ASSERT_LT(low, high);
  ASSERT_TRUE(cache.load(r, 1, false));
  EXPECT_EQ(counting.bytes(), low);
  auto held_low = cache.get(r, 1);  // a reader still holding the lower level keeps it intact
  ASSERT_TRUE(cache.load(r, store().levels(), false));
  EXPECT_EQ(counting.bytes(), high);  // only [low, high) more
  EXPECT_EQ(counting.ranges.load(), 1u);
  EXPECT_EQ(counting.range_bytes.load(), high - low);
  EXPECT_EQ(stats.record_bytes.load(), high);
  EXPECT_EQ(stats.prefix_extensions.load(), 1u);
  auto full = cache.get(r, store().levels());
  ASSERT_NE(full, nullptr);
  ASSERT_EQ(full->len, high);
  std::vector<uint8_t> direct(high);
  fid::storage::RangeRead whole{r, 0, direct, {}};
  local.read_ranges({&whole, 1});
  ASSERT_TRUE(whole.status.ok());
  EXPECT_EQ(std::vector<uint8_t>(full->data, full->data + full->len), direct);
  EXPECT_EQ(std::vector<uint8_t>(held_low->data, held_low->data + held_low->len),
            std::vector<uint8_t>(direct.begin(), direct.begin() + static_cast<std::ptrdiff_t>(low)));
  held_low.reset();
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.used(), (high + 4095) / 4096 * 4096);  // the lower level's memory went
}

TEST_F(RecordCacheTest, ARaisedLevelKeepsTheDamageFoundBelowAndFindsTheNew) {
  const auto& victim = jpeg_with(4);
  const auto pieces = store().pieces(victim);
  LocalRecordSource probe(store());
  ReadStats probe_stats;
  RecordCache layout(store(), probe, probe_stats, 16 << 20);
  const uint64_t low = layout.prefix_len(victim.record, 1);
  uint32_t below = UINT32_MAX, above = UINT32_MAX;  // a piece inside level 1's prefix, one past it
  for (uint32_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].offset + pieces[i].size <= low && below == UINT32_MAX) below = i;
    if (pieces[i].offset >= low && above == UINT32_MAX) above = i;
  }
  ASSERT_NE(below, UINT32_MAX);
  ASSERT_NE(above, UINT32_MAX);
  const auto& rec = store().records()[victim.record];
  fid::testutil::flip_byte(path() / rec.path, pieces[below].offset + pieces[below].size / 2);
  fid::testutil::flip_byte(path() / rec.path, pieces[above].offset + pieces[above].size / 2);
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache cache(store(), source, stats, 16 << 20);
  ASSERT_TRUE(cache.load(victim.record, 1, false));
  EXPECT_TRUE(cache.get(victim.record, 1)->is_bad(victim.id, below));
  ASSERT_TRUE(cache.load(victim.record, store().levels(), false));
  EXPECT_EQ(stats.prefix_extensions.load(), 1u);
  auto extended = cache.get(victim.record, store().levels());
  RecordCache fresh(store(), source, stats, 16 << 20);
  ASSERT_TRUE(fresh.load(victim.record, store().levels(), false));
  EXPECT_EQ(extended->bad_pieces, fresh.get(victim.record, store().levels())->bad_pieces);
  EXPECT_TRUE(extended->is_bad(victim.id, below));
  EXPECT_TRUE(extended->is_bad(victim.id, above));
}

TEST_F(RecordCacheTest, ARaisedLevelThatDoesNotFitBesideTheLowerIsReadWhole) {
  LocalRecordSource local(store());
  fid::testutil::CountingSource counting(local);
  ReadStats stats;
  const uint32_t r = jpeg_with(4).record;
  RecordCache probe(store(), local, stats, 16 << 20);
  const uint64_t low = probe.prefix_len(r, 1), high = probe.prefix_len(r, store().levels());
  const uint64_t budget = (high + 4095) / 4096 * 4096;  // the full prefix alone
  ASSERT_LT(low, high);
  RecordCache cache(store(), counting, stats, budget);
  ASSERT_TRUE(cache.load(r, 1, false));
  ASSERT_TRUE(cache.load(r, store().levels(), false));
  EXPECT_EQ(counting.bytes(), low + high);  // read from 0: the lower level had to go first
  EXPECT_LE(cache.peak(), budget);
  EXPECT_EQ(cache.get(r, store().levels())->len, high);
}

}  // namespace

namespace {

// A source that runs out of memory on its first read, as a bad_alloc anywhere in a load would.
class OutOfMemoryOnceSource final : public RecordSource {
 public:
  explicit OutOfMemoryOnceSource(RecordSource& inner) : inner_(inner) {}
  void read_ranges(std::span<RangeRead> batch, Done done) override {
    fail_once();
    inner_.read_ranges(batch, std::move(done));
  }
  void read_prefixes(std::span<PrefixRead> batch, Done done) override {
    fail_once();
    inner_.read_prefixes(batch, std::move(done));
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "out of memory once"; }

 private:
  void fail_once() {
    if (!failed_.exchange(true)) throw std::bad_alloc();
  }
  RecordSource& inner_;
  std::atomic<bool> failed_{false};
};

}  // namespace

// An exception in a load is a failed load: the reservation returns, readers waiting for it wake
// and read for themselves, and the record loads next time.
TEST_F(RecordCacheTest, ALoadThatThrowsWakesItsWaitersAndReturnsItsBudget) {
  LocalRecordSource local(store());
  OutOfMemoryOnceSource source(local);
  ReadStats stats;
  RecordCache cache(store(), source, stats, 16 << 20);
  const uint32_t r = 0;
  const int level = cache.prefix_level(r, 5);
  ASSERT_TRUE(cache.mark_queued(r, level));
  auto waiter = std::async(std::launch::async, [&] { return cache.get(r, level); });
  EXPECT_FALSE(cache.load(r, level, true));
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "a waiter never woke";
  EXPECT_EQ(waiter.get(), nullptr);
  EXPECT_EQ(cache.used(), 0u);
  EXPECT_TRUE(cache.load(r, level, true));
  EXPECT_NE(cache.get(r, level), nullptr);
}

TEST(ReaderLoadsTest, ALoadThatThrowsGivesItsSlotBack) {
  fid::core::ReaderLoads loads(nullptr);
  EXPECT_THROW(loads.run(1 << 20, [] { throw std::bad_alloc(); }), std::bad_alloc);
  EXPECT_EQ(loads.loading(), 0u);
  bool ran = false;
  loads.run(1 << 20, [&] { ran = true; });
  EXPECT_TRUE(ran);
}

// try_run starts a load only while a slot is free, and never waits for one.
TEST(ReaderLoadsTest, TryRunStartsOnlyWithAFreeSlot) {
  fid::core::ReaderLoads loads(nullptr, 2);
  int ran = 0;
  bool inner_started = true;
  EXPECT_TRUE(loads.try_run(1 << 20, [&] {
    EXPECT_EQ(loads.loading(), 1u);
    EXPECT_TRUE(loads.try_run(1 << 20, [&] {
      ++ran;
      inner_started = loads.try_run(1 << 20, [&] { ++ran; });  // a third: both slots are taken
    }));
    ++ran;
  }));
  EXPECT_FALSE(inner_started);
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(loads.loading(), 0u);
}
