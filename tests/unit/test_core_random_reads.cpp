// random_reads (core/random_reads.h, FileReader): records mode serves every file byte-identical to
// piece reads while loading each record once; concurrent readers of one record cause one load;
// the cache budget holds in records mode with a small cache; a source's local copy is read piece
// by piece when memory cannot hold every record; auto decides by size, both ways, and decides
// again after a level change.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_reader.h"
#include "core/filesystem.h"
#include "core/random_reads.h"
#include "counting_source.h"
#include "storage/disk_cache.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

using fid::config::RandomReads;
using fid::core::FileReader;
using fid::core::ReadShare;
using fid::storage::LocalRecordSource;
using fid::testutil::CountingSource;
using fid::testutil::GatedSource;

namespace {

// A reading of the reader's, by its stats key.
uint64_t reading(const FileReader& reader, std::string_view key) {
  fid::Readings all;
  reader.add_readings(all);
  for (const auto& r : all)
    if (r.key == key) return r.value;
  ADD_FAILURE() << "no reading " << key;
  return 0;
}


// A source that says it holds a local copy of every record (as a disk cache full of them does).
class LocalCopySource final : public fid::storage::RecordSource {
 public:
  explicit LocalCopySource(fid::storage::RecordSource& inner, const fid::index::Store& store) : inner_(inner), store_(store) {}
  void read_ranges(std::span<fid::storage::RangeRead> batch, Done done) override { inner_.read_ranges(batch, std::move(done)); }
  void read_prefixes(std::span<fid::storage::PrefixRead> batch, Done done) override {
    inner_.read_prefixes(batch, std::move(done));
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "local copy"; }
  uint64_t local_copy_len(uint32_t record) const override { return store_.records()[record].size; }

 private:
  fid::storage::RecordSource& inner_;
  const fid::index::Store& store_;
};

// A source whose reads of one record come back with a byte flipped while `corrupt` is set (a
// transfer damaged in flight): what a prefix or range read of that record delivers.
class CorruptingSource final : public fid::storage::RecordSource {
 public:
  CorruptingSource(fid::storage::RecordSource& inner, uint32_t record) : inner_(inner), record_(record) {}
  void read_ranges(std::span<fid::storage::RangeRead> batch, Done done) override {
    inner_.read_ranges(batch);
    for (auto& r : batch)
      if (corrupt && r.record == record_ && !r.dst.empty()) r.dst[r.dst.size() / 2] ^= 0x40;
    done();
  }
  void read_prefixes(std::span<fid::storage::PrefixRead> batch, Done done) override {
    inner_.read_prefixes(batch, [] {});
    for (auto& p : batch)
      if (corrupt && p.record == record_)
        for (uint64_t at = 4096; at < p.len; at += 4096) p.dst[at] ^= 0x40;  // every page past the header
    done();
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "corrupting"; }
  std::atomic<bool> corrupt{true};

 private:
  fid::storage::RecordSource& inner_;
  const uint32_t record_;
};

class RandomReadsTest : public fid::testutil::PackedStore {
 protected:
  // Every file id in a seeded random order.
  std::vector<uint32_t> shuffled_files(uint32_t seed) const {
    std::vector<uint32_t> ids;
    for (const auto& f : store().files()) ids.push_back(f.id);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    return ids;
  }
  std::vector<uint8_t> read_whole(FileReader& reader, const fid::index::File& f, int level) {
    auto r = reader.read(f, level, false, 0, reader.size(f, level));
    EXPECT_TRUE(r.ok()) << store().relative_path(f);
    return r.ok() ? r->to_vector() : std::vector<uint8_t>{};
  }
  std::vector<const fid::index::File*> files_of(uint32_t record) const {
    std::vector<const fid::index::File*> out;
    for (const auto& f : store().files())
      if (f.record == record) out.push_back(&f);
    return out;
  }
  size_t records_with_files() const {
    std::vector<bool> used(store().records().size(), false);
    for (const auto& f : store().files()) used[f.record] = true;
    return static_cast<size_t>(std::count(used.begin(), used.end(), true));
  }
};

TEST_F(RandomReadsTest, RecordsModeServesTheSameBytesAndLoadsEachRecordOnce) {
  LocalRecordSource local(store());
  CountingSource counting(local);
  fid::config::Settings settings;
  FileReader reader(store(), counting, settings, nullptr);
  reader.set_random_reads(true, true);
  const int L = store().levels();
  for (uint32_t id : shuffled_files(1)) {
    const auto& f = store().files()[id];
    const int level = f.kind == fid::index::FileKind::jpeg ? 5 : L;
    EXPECT_EQ(read_whole(reader, f, level), expected(f, level)) << store().relative_path(f);
  }
  EXPECT_EQ(counting.ranges.load(), 0u) << "no file read its own pieces";
  EXPECT_EQ(counting.prefixes.load(), records_with_files());
  EXPECT_EQ(reader.stats().read_loads.load(), records_with_files());
  EXPECT_EQ(reader.stats().records_read.load(), records_with_files());
  // Raised to full, a cached scan record fetches only its missing tail.
  const uint64_t before = counting.bytes();
  for (const auto& f : store().files()) {
    if (f.kind != fid::index::FileKind::jpeg) continue;
    EXPECT_EQ(read_whole(reader, f, L), expected(f, L));
  }
  EXPECT_GT(reader.stats().prefix_extensions.load(), 0u);
  EXPECT_EQ(counting.prefixes.load(), records_with_files()) << "extensions are tail ranges, not whole prefixes";
  uint64_t tails = 0;
  for (const auto& r : store().records())
    if (r.layout == fid::index::RecordLayout::scan && !r.region_end.empty()) tails += r.region_end.back() - r.region_end[5];
  EXPECT_EQ(counting.bytes() - before, tails);
}

// A record damaged in transit: its damaged files fail (EIO, never wrong bytes) while the damage
// lasts; once it has ended, the next read of each serves the right bytes (its pieces are read
// again, while the prefix's good pieces go on serving the rest).
TEST_F(RandomReadsTest, DamageInTransitIsForgottenOnceItEnds) {
  LocalRecordSource local(store());
  const uint32_t r = jpeg_with(4).record;
  CorruptingSource corrupting(local, r);
  FileReader reader(store(), corrupting, fid::config::Settings{}, nullptr);
  reader.set_random_reads(true, true);
  const int L = store().levels();
  const std::vector<const fid::index::File*> members = files_of(r);
  size_t failed = 0;
  for (const auto* f : members) {
    auto got = reader.read(*f, L, false, 0, reader.size(*f, L));
    if (got.ok()) EXPECT_EQ(got->to_vector(), expected(*f, L));
    else failed += got.error().code == EIO;
  }
  ASSERT_GT(failed, 0u) << "the damage reached some files";
  corrupting.corrupt = false;  // the fault ends
  for (const auto* f : members) EXPECT_EQ(read_whole(reader, *f, L), expected(*f, L)) << store().relative_path(*f);
}

TEST_F(RandomReadsTest, PiecesModeReadsOnlyPieces) {
  LocalRecordSource local(store());
  CountingSource counting(local);
  FileReader reader(store(), counting, fid::config::Settings{}, nullptr);
  reader.set_random_reads(false, true);
  for (uint32_t id : shuffled_files(2)) {
    const auto& f = store().files()[id];
    EXPECT_EQ(read_whole(reader, f, store().levels()), expected(f, store().levels()));
  }
  EXPECT_EQ(counting.prefixes.load(), 0u);
  EXPECT_GT(counting.ranges.load(), 0u);
}

// From a remote store, readers of a record being loaded wait for it: one load, no piece reads.
TEST_F(RandomReadsTest, ConcurrentReadersOfOneRecordCauseOneLoad) {
  LocalRecordSource local(store());
  GatedSource gated(local);
  CountingSource counting(gated);
  FileReader reader(store(), counting, fid::config::Settings{}, nullptr);
  reader.set_random_reads(true, true);
  const std::vector<const fid::index::File*> members = files_of(store().files()[0].record);
  ASSERT_GE(members.size(), 3u);
  const int L = store().levels();
  auto first = std::async(std::launch::async, [&] { return read_whole(reader, *members[0], L); });
  gated.wait_for_reader();  // the first reader's load is in flight, held in storage
  std::vector<std::future<std::vector<uint8_t>>> others;
  for (size_t i = 1; i < members.size(); ++i)
    others.push_back(std::async(std::launch::async, [&, i] { return read_whole(reader, *members[i], L); }));
  EXPECT_EQ(others[0].wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "it waits for the load";
  gated.open();
  EXPECT_EQ(first.get(), expected(*members[0], L));
  for (size_t i = 1; i < members.size(); ++i) EXPECT_EQ(others[i - 1].get(), expected(*members[i], L));
  EXPECT_EQ(counting.prefixes.load(), 1u);
  EXPECT_EQ(counting.ranges.load(), 0u);
  EXPECT_EQ(reader.stats().records_read.load(), 1u);
}

// On a local disk a reader does not wait for a record another reader is loading: it reads its
// own pieces meanwhile (the disk serves both), and the record is still loaded once.
TEST_F(RandomReadsTest, OnALocalDiskReadersOfARecordBeingLoadedReadTheirPieces) {
  LocalRecordSource local(store());
  GatedSource gated(local, /*local=*/true);
  CountingSource counting(gated);
  FileReader reader(store(), counting, fid::config::Settings{}, nullptr);
  reader.set_random_reads(true, true);
  const std::vector<const fid::index::File*> members = files_of(store().files()[0].record);
  ASSERT_GE(members.size(), 3u);
  const int L = store().levels();
  auto first = std::async(std::launch::async, [&] { return read_whole(reader, *members[0], L); });
  gated.wait_for_reader();  // the first reader's load is in flight, held in storage
  for (size_t i = 1; i < members.size(); ++i)  // served while the load is held
    EXPECT_EQ(read_whole(reader, *members[i], L), expected(*members[i], L)) << store().relative_path(*members[i]);
  EXPECT_GT(counting.ranges.load(), 0u);
  gated.open();
  EXPECT_EQ(first.get(), expected(*members[0], L));
  EXPECT_EQ(counting.prefixes.load(), 1u);
  EXPECT_EQ(reader.stats().records_read.load(), 1u);
  // Once loaded, the record serves them all.
  const uint64_t ranges = counting.ranges.load();
  for (const auto* f : members) EXPECT_EQ(read_whole(reader, *f, L), expected(*f, L));
  EXPECT_EQ(counting.ranges.load(), ranges);
}

TEST_F(RandomReadsTest, TheBudgetHoldsWithACacheSmallerThanTheStore) {
  LocalRecordSource local(store());
  fid::config::Settings settings;
  settings.cache_bytes = 2 * (16 << 10) + 8192;  // about two records
  FileReader reader(store(), local, settings, nullptr);
  reader.set_random_reads(true, false);
  for (int round = 0; round < 3; ++round) {
    for (uint32_t id : shuffled_files(static_cast<uint32_t>(round))) {
      const auto& f = store().files()[id];
      EXPECT_EQ(read_whole(reader, f, store().levels()), expected(f, store().levels()));
      EXPECT_LE(reading(reader, "cache.used"), settings.cache_bytes);
    }
  }
  EXPECT_LE(reading(reader, "cache.peak"), settings.cache_bytes);
  EXPECT_GT(reader.stats().cache_evictions.load(), 0u);
}

TEST_F(RandomReadsTest, ALocalCopyIsReadPieceByPieceUnlessMemoryHoldsEveryRecord) {
  LocalRecordSource local(store());
  CountingSource counting(local);
  LocalCopySource copy(counting, store());
  FileReader reader(store(), copy, fid::config::Settings{}, nullptr);
  const auto& f = store().files()[0];
  const int L = store().levels();
  reader.set_random_reads(true, false);
  EXPECT_EQ(read_whole(reader, f, L), expected(f, L));
  EXPECT_EQ(counting.prefixes.load(), 0u);
  EXPECT_EQ(reader.stats().local_copy_reads.load(), 1u);
  reader.set_random_reads(true, true);
  EXPECT_EQ(read_whole(reader, f, L), expected(f, L));
  EXPECT_EQ(counting.prefixes.load(), 1u);
}

// With a disk cache and a memory cache that holds one record at a time, a reader whose record
// cannot be given room while another record loads waits for that room (rather than reading its
// pieces, which would leave its record off the disk): every record reaches the disk cache, so a
// later pass over the same records fetches nothing from the store.
TEST_F(RandomReadsTest, WithADiskCacheEachRecordIsFetchedOnceWhenMemoryIsShort) {
  LocalRecordSource local(store());
  CountingSource counting(local);
  auto gated_owned = std::make_unique<GatedSource>(counting);
  GatedSource& gated = *gated_owned;
  auto disk = fid::storage::make_disk_cached_source(store(), std::move(gated_owned), dir_.path() / "dc", 64 << 20, "s");
  const int L = store().levels();
  const fid::index::File& a = jpeg_with(static_cast<uint32_t>(L + 1));
  const fid::index::File* b = nullptr;
  for (const auto& f : store().files())
    if (f.kind == fid::index::FileKind::jpeg && f.record != a.record) b = &f;
  ASSERT_NE(b, nullptr);
  auto memory = [&](const fid::index::File& f) {
    const int lvl = store().records()[f.record].layout == fid::index::RecordLayout::scan ? L : 0;
    return fid::core::prefix_memory(fid::core::record_prefix_len(store(), f.record, lvl));
  };
  fid::config::Settings settings;
  settings.cache_bytes = std::max(memory(a), memory(*b));  // one prefix at a time
  ASSERT_LT(settings.cache_bytes, memory(a) + memory(*b));
  {
    FileReader reader(store(), *disk, settings, nullptr);
    reader.set_random_reads(true, false);
    auto first = std::async(std::launch::async, [&] { return read_whole(reader, a, L); });
    gated.wait_for_reader();  // a's record is loading (its memory reserved), held in storage
    auto second = std::async(std::launch::async, [&] { return read_whole(reader, *b, L); });
    EXPECT_EQ(second.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "it waits for room";
    gated.open();
    EXPECT_EQ(first.get(), expected(a, L));
    EXPECT_EQ(second.get(), expected(*b, L));
    EXPECT_LE(reading(reader, "cache.peak"), settings.cache_bytes);
  }
  fid::storage::as_disk_cache(*disk)->flush();
  const uint64_t fetched = counting.bytes();
  FileReader again(store(), *disk, settings, nullptr);
  again.set_random_reads(true, false);
  EXPECT_EQ(read_whole(again, a, L), expected(a, L));
  EXPECT_EQ(read_whole(again, *b, L), expected(*b, L));
  EXPECT_EQ(counting.bytes(), fetched) << "both records are on local disk";
  EXPECT_EQ(again.stats().local_copy_reads.load(), 2u);
}

TEST_F(RandomReadsTest, PrefixBytesFollowLevelsAndTheShare) {
  const int L = store().levels();
  auto policy_at = [&](int level) {
    fid::config::Settings s;
    s.scan_group = level;
    return fid::core::make_level_policy(store(), s);
  };
  auto full = policy_at(fid::config::kFull);
  auto low = policy_at(2);
  const uint64_t all_full = fid::core::prefix_bytes_needed(store(), full, ReadShare{});
  const uint64_t all_low = fid::core::prefix_bytes_needed(store(), low, ReadShare{});
  uint64_t expect_full = 0;
  for (const auto& r : store().records())
    if (!r.region_end.empty()) expect_full += (r.region_end.back() + 4095) / 4096 * 4096;
  EXPECT_EQ(all_full, expect_full);
  EXPECT_LT(all_low, all_full);
  // One file raised to full raises its record's prefix only.
  const auto& jpeg = jpeg_with(static_cast<uint32_t>(L + 1));
  ASSERT_TRUE(low.set_file(jpeg.id, L));
  const uint64_t one_raised = fid::core::prefix_bytes_needed(store(), low, ReadShare{});
  EXPECT_GT(one_raised, all_low);
  EXPECT_LT(one_raised, all_full);
  // A share counts its records only.
  ReadShare share;
  share.records.assign(store().records().size(), false);
  share.records[jpeg.record] = true;
  const auto& rec = store().records()[jpeg.record];
  EXPECT_EQ(fid::core::prefix_bytes_needed(store(), full, share), (rec.region_end.back() + 4095) / 4096 * 4096);
}

TEST(RandomReadsDecision, AutoDecidesBySizeBothWays) {
  using fid::core::decide_random_reads;
  auto fits = decide_random_reads(RandomReads::auto_, 1000, 1000, std::nullopt, "every record");
  EXPECT_TRUE(fits.records);
  EXPECT_TRUE(fits.memory_holds_all);
  EXPECT_EQ(fits.budget_name, "cache");
  EXPECT_EQ(fits.text(), "records (auto: the prefixes of every record need 1000 B, cache holds 1000 B)");
  auto too_big = decide_random_reads(RandomReads::auto_, 1001, 1000, std::nullopt, "every record");
  EXPECT_FALSE(too_big.records);
  EXPECT_EQ(too_big.text(), "pieces (auto: the prefixes of every record need 1001 B, cache holds only 1000 B)");
  // A remote store's disk cache decides; memory may still be too small to hold them all.
  auto disk = decide_random_reads(RandomReads::auto_, 5000, 1000, 8000, "every record");
  EXPECT_TRUE(disk.records);
  EXPECT_FALSE(disk.memory_holds_all);
  EXPECT_EQ(disk.budget_name, "disk_cache_size");
  EXPECT_FALSE(decide_random_reads(RandomReads::auto_, 9000, 100000, 8000, "x").records);
  // Set explicitly, the sizes do not matter.
  EXPECT_TRUE(decide_random_reads(RandomReads::records, 9000, 1, std::nullopt, "x").records);
  EXPECT_FALSE(decide_random_reads(RandomReads::pieces, 1, 9000, std::nullopt, "x").records);
  EXPECT_EQ(decide_random_reads(RandomReads::pieces, 1, 9000, std::nullopt, "x").text(), "pieces (random_reads=pieces)");
}

// A mount decides at start and again after a level change: with `cache` between the bytes of
// level 2 and of full, level 2 reads records and full reads pieces.
TEST_F(RandomReadsTest, AMountDecidesAgainAfterALevelChange) {
  LocalRecordSource local(store());
  auto policy_at = [&](int level) {
    fid::config::Settings s;
    s.scan_group = level;
    return fid::core::prefix_bytes_needed(store(), fid::core::make_level_policy(store(), s), ReadShare{});
  };
  const uint64_t low = policy_at(2), full = policy_at(fid::config::kFull);
  ASSERT_LT(low, full);
  fid::config::Settings settings;
  settings.scan_group = 2;
  settings.cache_bytes = low;
  fid::core::Filesystem fs(store(), local, settings, {"/mnt/t", nullptr, 0, std::nullopt, {}});
  const fid::core::Caller kOwner{};  // root, who mounted
  auto mode = [&] {
    const uint64_t ino = fs.lookup(1, ".fidelity")->ino;
    const uint64_t stats = fs.lookup(ino, "stats")->ino;
    auto r = fs.read(stats, 0, 1 << 20);
    return nlohmann::json::parse(std::string(r->data.begin(), r->data.end()))["random_reads"];
  };
  EXPECT_EQ(mode()["mode"], "records");
  EXPECT_EQ(mode()["needed"], low);
  ASSERT_TRUE(fs.setxattr(1, "user.fidelity.scan_group", "full", 0, kOwner).ok());
  EXPECT_EQ(mode()["mode"], "pieces");
  EXPECT_EQ(mode()["needed"], full);
  ASSERT_TRUE(fs.removexattr(1, "user.fidelity.scan_group", kOwner).ok());
  EXPECT_EQ(mode()["mode"], "records");
  fs.detach();
}

}  // namespace
