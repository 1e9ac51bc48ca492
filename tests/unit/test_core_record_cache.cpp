// RecordCache: the byte budget is never exceeded (held prefixes count until let go), readers wait
// for a load in flight instead of reading storage themselves, a prefix a reader holds stays
// intact while the cache evicts around it, and a prefix's damaged piece is found at load.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/record_cache.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

using fid::core::Prefix;
using fid::core::ReadStats;
using fid::core::RecordCache;
using fid::storage::LocalRecordSource;
using fid::storage::PrefixRead;
using fid::storage::RangeRead;
using fid::storage::RecordSource;

namespace {

// A source whose prefix reads wait until the test opens the gate (a slow remote read).
class GatedSource final : public RecordSource {
 public:
  explicit GatedSource(RecordSource& inner) : inner_(inner) {}
  void read_ranges(std::span<RangeRead> batch, Done done) override { inner_.read_ranges(batch, std::move(done)); }
  void read_prefixes(std::span<PrefixRead> batch, Done done) override {
    {
      std::unique_lock lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    inner_.read_prefixes(batch, std::move(done));
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "gated"; }
  void wait_for_reader() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  RecordSource& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

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
  EXPECT_EQ(reader.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);  // it waits
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

}  // namespace
