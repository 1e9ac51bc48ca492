// The disk cache of record prefixes in front of a source: bytes identical to the source; a
// second read comes from disk; a longer prefix fetches only its tail; LRU eviction keeps the
// folder under its size; a remount finds the copies; a crash's temporary files are never served
// and are removed; two caches on one folder read correctly from many threads while evicting; a
// truncated, foreign or damaged copy never gives wrong bytes; an unusable folder fails no read;
// read_scratch serves ranges a copy holds in place, and a copy kept open notices a change.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <chrono>
#include <thread>
#include <vector>

#include "core/read_range.h"
#include "core/record_cache.h"
#include "counting_source.h"
#include "storage/disk_cache.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

namespace fs = std::filesystem;
using fid::storage::DiskCache;
using fid::storage::LocalRecordSource;
using fid::storage::RangeRead;
using fid::storage::RecordSource;
using fid::testutil::CountingSource;

namespace {

constexpr const char* kIdentity = "store-a";

struct Cached {
  CountingSource* counting = nullptr;  // what reached the source behind the cache
  std::unique_ptr<RecordSource> source;
  DiskCache* disk = nullptr;
};

class DiskCacheTest : public fid::testutil::PackedStore {
 protected:
  void SetUp() override {
    PackedStore::SetUp();
    local_ = std::make_unique<LocalRecordSource>(store());
  }

  fs::path cache_dir() const { return dir_.path() / "cache"; }
  fs::path entry(uint32_t r) const { return cache_dir() / kIdentity / (std::to_string(r) + ".p"); }

  Cached cached(uint64_t max_bytes, const fs::path& dir = {}) {
    auto counting = std::make_unique<CountingSource>(*local_);
    Cached c;
    c.counting = counting.get();
    c.source = fid::storage::make_disk_cached_source(store(), std::move(counting), dir.empty() ? cache_dir() : dir,
                                                     max_bytes, kIdentity);
    c.disk = fid::storage::as_disk_cache(*c.source);
    return c;
  }

  // Bytes [offset, offset + len) of record r, read from its file.
  std::vector<uint8_t> file_bytes(uint32_t r, uint64_t offset, uint64_t len) const {
    std::ifstream in(path() / store().records()[r].path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    std::vector<uint8_t> out(len);
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(len));
    return out;
  }
  // A prefix read through `source` into a page-aligned buffer, as the record cache does.
  static std::vector<uint8_t> read_prefix(RecordSource& source, uint32_t r, uint64_t len) {
    uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (len + 4095) / 4096 * 4096));
    fid::Status st = source.read_prefix(r, len, buf);
    EXPECT_TRUE(st.ok()) << st.error().message;
    std::vector<uint8_t> out(buf, buf + len);
    std::free(buf);
    return out;
  }
  static std::vector<uint8_t> read_range(RecordSource& source, uint32_t r, uint64_t offset, uint64_t len) {
    std::vector<uint8_t> out(len);
    RangeRead rr{r, offset, out, {}};
    source.read_ranges({&rr, 1});
    EXPECT_TRUE(rr.status.ok()) << rr.status.error().message;
    return out;
  }
  uint64_t full_len(uint32_t r) const { return store().records()[r].region_end.back(); }
  // Where a copy of record r's bytes up to `end` stops: at the start of a piece running past it.
  uint64_t kept_end(uint32_t r, uint64_t end) const {
    for (uint32_t id : store().record_files(r))
      for (const auto& p : store().pieces(store().files()[id]))
        if (p.offset < end && p.offset + p.size > end) return p.offset;
    return end;
  }
  // A scan record with at least two levels above its headers (the n-th of them).
  uint32_t scan_record(int n = 0) const {
    for (const auto& r : store().records())
      if (r.layout == fid::index::RecordLayout::scan && r.region_end.size() >= 3 && r.region_end[1] + 400 < r.region_end.back() &&
          n-- == 0)
        return r.id;
    throw std::runtime_error("no scan record");
  }
  uint64_t folder_bytes() const {
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(cache_dir() / kIdentity))
      if (e.path().extension() == ".p") total += e.file_size();
    return total;
  }
  // Sets a cached entry's last use (its mtime, what eviction orders by) `seconds` into the past.
  void last_used(uint32_t r, int seconds) const {
    const timespec t[2] = {{0, UTIME_OMIT}, {::time(nullptr) - seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, entry(r).c_str(), t, 0), 0) << entry(r);
  }

  std::unique_ptr<LocalRecordSource> local_;
};

TEST_F(DiskCacheTest, SecondReadComesFromDisk) {
  Cached c = cached(64 << 20);
  ASSERT_NE(c.disk, nullptr);
  EXPECT_NE(c.source->describe().find((cache_dir() / kIdentity).string()), std::string::npos) << c.source->describe();
  uint64_t total = 0;
  for (const auto& r : store().records()) {
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id))) << r.path;
    total += full_len(r.id);
  }
  c.disk->flush();
  EXPECT_EQ(c.counting->bytes(), total);
  for (const auto& r : store().records()) {
    EXPECT_EQ(fs::file_size(entry(r.id)), full_len(r.id));
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id))) << r.path;
  }
  EXPECT_EQ(c.counting->bytes(), total);  // nothing more from the source
  const auto s = c.disk->disk_stats();
  EXPECT_EQ(s.hits, store().records().size());
  EXPECT_EQ(s.misses, store().records().size());
  EXPECT_EQ(s.bytes_from_disk, total);
  EXPECT_EQ(s.used_bytes, total);
  EXPECT_EQ(s.errors, 0u);
}

TEST_F(DiskCacheTest, ALongerPrefixFetchesOnlyTheTail) {
  Cached c = cached(64 << 20);
  const uint32_t r = scan_record();
  const uint64_t low = store().records()[r].region_end[1], high = full_len(r);
  EXPECT_EQ(read_prefix(*c.source, r, low), file_bytes(r, 0, low));
  c.disk->flush();
  const uint64_t before = c.counting->bytes();
  EXPECT_EQ(read_prefix(*c.source, r, high), file_bytes(r, 0, high));
  EXPECT_EQ(c.counting->bytes() - before, high - low);
  EXPECT_EQ(c.counting->ranges.load(), 1u);  // the tail, as one range
  c.disk->flush();
  EXPECT_EQ(fs::file_size(entry(r)), high);  // the copy now holds the longer prefix
  EXPECT_EQ(read_prefix(*c.source, r, high), file_bytes(r, 0, high));
  EXPECT_EQ(c.counting->bytes() - before, high - low);
  EXPECT_EQ(c.disk->disk_stats().partial_hits, 1u);

  // Ranges: inside the copy from disk; past it to the source, kept when they continue the copy.
  const uint32_t other = scan_record(1);
  const uint64_t other_low = store().records()[other].region_end[1];
  EXPECT_EQ(read_prefix(*c.source, other, other_low), file_bytes(other, 0, other_low));
  c.disk->flush();
  const uint64_t at = c.counting->bytes();
  EXPECT_EQ(read_range(*c.source, other, 20, other_low - 40), file_bytes(other, 20, other_low - 40));
  EXPECT_EQ(c.counting->bytes(), at);
  const uint64_t far = other_low + 100, len = std::min<uint64_t>(50, full_len(other) - far);
  EXPECT_EQ(read_range(*c.source, other, far, len), file_bytes(other, far, len));  // not contiguous: not kept
  EXPECT_EQ(c.counting->bytes(), at + len);
  const uint64_t straddle = std::min<uint64_t>(200, full_len(other) - other_low);
  EXPECT_EQ(read_range(*c.source, other, other_low - 10, straddle + 10), file_bytes(other, other_low - 10, straddle + 10));
  EXPECT_EQ(c.counting->bytes(), at + len + straddle);  // only the part past the copy
  c.disk->flush();
  EXPECT_EQ(fs::file_size(entry(other)), kept_end(other, other_low + straddle));  // whole pieces only
  EXPECT_EQ(read_prefix(*c.source, other, other_low + straddle), file_bytes(other, 0, other_low + straddle));
}

// local_copy_len says how much of a record the folder holds (what random_reads=records reads
// piece by piece from disk): 0 without a copy, the copy's length once written, 0 for a foreign one.
TEST_F(DiskCacheTest, LocalCopyLenIsTheCopysLength) {
  Cached c = cached(64 << 20);
  const uint32_t r = scan_record();
  const uint64_t low = store().records()[r].region_end[1];
  EXPECT_EQ(c.source->local_copy_len(r), 0u);
  EXPECT_EQ(read_prefix(*c.source, r, low), file_bytes(r, 0, low));
  c.disk->flush();
  EXPECT_EQ(c.source->local_copy_len(r), low);
  EXPECT_EQ(c.source->local_copy_len(static_cast<uint32_t>(store().records().size())), 0u);  // no such record
  fs::resize_file(entry(r), store().records()[r].size + 1);  // longer than its record: not ours
  EXPECT_EQ(c.source->local_copy_len(r), 0u);
  EXPECT_EQ(local_->local_copy_len(r), 0u);  // a local store keeps no copies
}

TEST_F(DiskCacheTest, EvictionRemovesTheLeastRecentlyUsed) {
  ASSERT_GE(store().records().size(), 4u);
  const uint64_t s0 = full_len(0), s1 = full_len(1), s2 = full_len(2), s3 = full_len(3);
  const uint64_t max = s0 + s1 + s2 + s3 - 1;  // the fourth copy does not fit beside the three others
  ASSERT_GE(s1, max / 16 + 1);                  // and evicting one is enough (the slack)
  Cached c = cached(max);
  for (uint32_t r : {0u, 1u, 2u}) {
    read_prefix(*c.source, r, full_len(r));
    c.disk->flush();
    last_used(r, 300 - 100 * static_cast<int>(r));  // used 300, 200 and 100 s ago
  }
  read_prefix(*c.source, 0, full_len(0));  // record 0 used again (now): record 1 is the oldest
  EXPECT_EQ(read_prefix(*c.source, 3, s3), file_bytes(3, 0, s3));
  c.disk->flush();
  EXPECT_TRUE(fs::exists(entry(0)));
  EXPECT_FALSE(fs::exists(entry(1)));
  EXPECT_TRUE(fs::exists(entry(2)));
  EXPECT_TRUE(fs::exists(entry(3)));
  EXPECT_EQ(c.disk->disk_stats().evictions, 1u);
  EXPECT_LE(folder_bytes(), max);
  EXPECT_EQ(c.disk->disk_stats().used_bytes, folder_bytes());
  // Every record in turn, twice: the folder never grows past max.
  for (int round = 0; round < 2; ++round)
    for (const auto& r : store().records()) {
      EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
      c.disk->flush();
      EXPECT_LE(folder_bytes(), max);
    }
  // A smaller max at the next mount trims the folder at once.
  c = {};
  Cached small = cached(s0);
  EXPECT_LE(folder_bytes(), s0);
}

TEST_F(DiskCacheTest, ARemountFindsTheCopies) {
  {
    Cached c = cached(64 << 20);
    for (const auto& r : store().records()) read_prefix(*c.source, r.id, full_len(r.id));
  }  // written before the cache goes
  Cached again = cached(64 << 20);
  for (const auto& r : store().records())
    EXPECT_EQ(read_prefix(*again.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
  EXPECT_EQ(again.counting->bytes(), 0u);
  EXPECT_EQ(again.disk->disk_stats().hits, store().records().size());
  // Another store's identity shares nothing.
  auto counting = std::make_unique<CountingSource>(*local_);
  CountingSource& other = *counting;
  auto source = fid::storage::make_disk_cached_source(store(), std::move(counting), cache_dir(), 64 << 20, "store-b");
  read_prefix(*source, 0, full_len(0));
  EXPECT_EQ(other.bytes(), full_len(0));
}

TEST_F(DiskCacheTest, ACrashsTemporaryFilesAreNeverServedAndAreRemoved) {
  const fs::path folder = cache_dir() / kIdentity;
  fs::create_directories(folder);
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  auto write = [&](const fs::path& p, uint64_t len) {
    auto bytes = file_bytes(0, 0, len);
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(len));
  };
  const fs::path of_dead = folder / (".tmp-" + std::to_string(dead) + "-1-0");
  const fs::path stale = folder / (".tmp-" + std::to_string(::getpid()) + "-1-7");
  const fs::path fresh = folder / (".tmp-" + std::to_string(::getpid()) + "-1-8");
  write(of_dead, full_len(0) / 2);  // a crash half way through writing record 0's copy
  write(stale, 100);
  write(fresh, 100);
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  Cached c = cached(64 << 20);
  EXPECT_FALSE(fs::exists(of_dead));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));  // its writer may be at work
  EXPECT_EQ(c.disk->disk_stats().used_bytes, 0u);  // temporary files are not counted
  EXPECT_EQ(read_prefix(*c.source, 0, full_len(0)), file_bytes(0, 0, full_len(0)));
  EXPECT_EQ(c.counting->bytes(), full_len(0));  // nothing served from the temporary file
}

TEST_F(DiskCacheTest, TwoCachesOnOneFolderReadCorrectlyWhileEvicting) {
  const uint64_t max = 3 * (16 << 10);
  Cached a = cached(max), b = cached(max);
  const auto& records = store().records();
  std::vector<std::vector<uint8_t>> want;
  for (const auto& r : records) want.push_back(file_bytes(r.id, 0, full_len(r.id)));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      RecordSource& source = *(t % 2 ? a : b).source;
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < 300; ++i) {
        const auto& r = records[rng() % records.size()];
        const uint64_t len = r.region_end[rng() % r.region_end.size()];
        if (rng() % 3) {
          auto got = read_prefix(source, r.id, len);
          if (!std::equal(got.begin(), got.end(), want[r.id].begin())) ++wrong;
        } else {
          const uint64_t off = rng() % len, n = 1 + rng() % (len - off);
          auto got = read_range(source, r.id, off, n);
          if (!std::equal(got.begin(), got.end(), want[r.id].begin() + static_cast<std::ptrdiff_t>(off))) ++wrong;
        }
      }
    });
  for (auto& t : threads) t.join();
  a.disk->flush();
  b.disk->flush();
  EXPECT_EQ(wrong.load(), 0);
  const auto sa = a.disk->disk_stats(), sb = b.disk->disk_stats();
  EXPECT_GT(sa.evictions + sb.evictions, 0u);
  EXPECT_GT(sa.hits + sb.hits, 0u);
  for (const auto& e : fs::directory_iterator(cache_dir() / kIdentity)) {  // every copy a true prefix
    if (e.path().extension() != ".p") continue;
    const auto r = static_cast<uint32_t>(std::stoul(e.path().stem().string()));
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want[r].begin())) << e.path();
  }
}

TEST_F(DiskCacheTest, TwoProcessesShareOneFolder) {
  const uint64_t max = 3 * (16 << 10);
  const auto& records = store().records();
  std::vector<std::vector<uint8_t>> want;
  for (const auto& r : records) want.push_back(file_bytes(r.id, 0, full_len(r.id)));
  // Random prefixes and ranges through a cache of its own; how many came back wrong.
  auto run = [&](uint32_t seed) {
    Cached c = cached(max);
    std::mt19937 rng(seed);
    int wrong = 0;
    for (int i = 0; i < 400; ++i) {
      const auto& r = records[rng() % records.size()];
      const uint64_t len = r.region_end[rng() % r.region_end.size()];
      const uint64_t off = rng() % 2 ? 0 : rng() % len, n = len - off;
      auto got = off == 0 ? read_prefix(*c.source, r.id, len) : read_range(*c.source, r.id, off, n);
      if (!std::equal(got.begin(), got.end(), want[r.id].begin() + static_cast<std::ptrdiff_t>(off))) ++wrong;
    }
    return wrong;
  };
  const pid_t child = ::fork();
  if (child == 0) ::_exit(std::min(run(1), 100));
  ASSERT_GT(child, 0);
  EXPECT_EQ(run(2), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);  // the child's wrong reads
}

TEST_F(DiskCacheTest, ATruncatedOrForeignCopyIsNotServed) {
  Cached c = cached(64 << 20);
  const uint32_t r = scan_record();
  const uint64_t len = full_len(r);
  read_prefix(*c.source, r, len);
  c.disk->flush();
  // Truncated half way: a shorter prefix, and only the rest comes from the source.
  fs::resize_file(entry(r), len / 2);
  uint64_t before = c.counting->bytes();
  EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len));
  EXPECT_EQ(c.counting->bytes() - before, len - len / 2);
  EXPECT_EQ(read_range(*c.source, r, len / 2 - 8, 16), file_bytes(r, len / 2 - 8, 16));
  c.disk->flush();
  // Shorter than a header, a foreign header, longer than the record: read whole from the source
  // and replaced.
  for (int damage = 0; damage < 3; ++damage) {
    if (damage == 0) fs::resize_file(entry(r), 10);
    if (damage == 1) fid::testutil::flip_byte(entry(r), 8);  // the record id in the header
    if (damage == 2) fs::resize_file(entry(r), store().records()[r].size + 1);
    before = c.counting->bytes();
    const uint64_t errors = c.disk->disk_stats().errors;
    EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len)) << damage;
    EXPECT_EQ(c.counting->bytes() - before, len) << damage;
    EXPECT_EQ(c.disk->disk_stats().errors, errors + 1) << damage;
    c.disk->flush();
    EXPECT_EQ(fs::file_size(entry(r)), len) << damage;
    before = c.counting->bytes();
    EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len)) << damage;
    EXPECT_EQ(c.counting->bytes(), before) << damage;  // the replacement serves
  }
}

TEST_F(DiskCacheTest, ADamagedCopyIsDroppedAndReadAgain) {
  const auto& victim = jpeg_with(3);
  const auto& piece = store().pieces(victim)[2];
  Cached c = cached(64 << 20);
  const uint64_t len = full_len(victim.record);
  read_prefix(*c.source, victim.record, len);
  c.disk->flush();
  fid::testutil::flip_byte(entry(victim.record), piece.offset + 1);  // bit rot on the cache's disk
  fid::core::ReadStats stats;
  fid::core::RecordCache cache(store(), *c.source, stats, 16 << 20);
  ASSERT_TRUE(cache.load(victim.record, 0, false));
  auto p = cache.get(victim.record, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->bad_pieces.empty());  // the copy was dropped and the prefix read from the source
  EXPECT_EQ(std::vector<uint8_t>(p->data, p->data + p->len), file_bytes(victim.record, 0, p->len));
  EXPECT_EQ(c.disk->disk_stats().dropped, 1u);
  c.disk->flush();
  EXPECT_EQ(read_prefix(*c.source, victim.record, len), file_bytes(victim.record, 0, len));  // a good copy again
}

// A source whose first read gives one byte wrong (a transfer damaged on the way).
class DamagedOnceSource final : public RecordSource {
 public:
  DamagedOnceSource(RecordSource& inner, uint64_t at) : inner_(inner), at_(at) {}
  void read_ranges(std::span<RangeRead> batch, Done done) override {
    inner_.read_ranges(batch);
    for (RangeRead& r : batch)
      if (r.offset <= at_ && at_ < r.offset + r.dst.size() && !damaged_.exchange(true)) r.dst[at_ - r.offset] ^= 0x40;
    done();
  }
  void read_prefixes(std::span<fid::storage::PrefixRead> batch, Done done) override {
    for (auto& p : batch) {
      p.status = inner_.read_prefix(p.record, p.len, p.dst);
      if (at_ < p.len && !damaged_.exchange(true)) p.dst[at_] ^= 0x40;
    }
    done();
  }
  const std::vector<std::string>& problems() const override { return inner_.problems(); }
  std::string describe() const override { return "damaged once"; }

 private:
  RecordSource& inner_;
  const uint64_t at_;
  std::atomic<bool> damaged_{false};
};

// What the cache keeps is what the store's checksums vouch for: a damaged transfer is served
// (the reader finds the damage) but never written to the folder, and a copy ends at a piece's end.
TEST_F(DiskCacheTest, ADamagedTransferIsNeverKept) {
  const auto& victim = jpeg_with(3);
  const auto& piece = store().pieces(victim)[2];
  const uint32_t r = victim.record;
  const uint64_t len = full_len(r);
  auto source = fid::storage::make_disk_cached_source(
      store(), std::make_unique<DamagedOnceSource>(*local_, piece.offset + 1), cache_dir(), 64 << 20, kIdentity);
  DiskCache* disk = fid::storage::as_disk_cache(*source);
  EXPECT_NE(read_prefix(*source, r, len), file_bytes(r, 0, len));
  disk->flush();
  EXPECT_FALSE(fs::exists(entry(r)));
  EXPECT_EQ(disk->disk_stats().dropped, 1u);
  // Up to the middle of the piece: kept up to its start.
  EXPECT_EQ(read_prefix(*source, r, piece.offset + 5), file_bytes(r, 0, piece.offset + 5));
  disk->flush();
  ASSERT_TRUE(fs::exists(entry(r)));
  EXPECT_EQ(fs::file_size(entry(r)), piece.offset);
  EXPECT_EQ(read_prefix(*source, r, len), file_bytes(r, 0, len));
  disk->flush();
  EXPECT_EQ(fs::file_size(entry(r)), len);
}

// The record's 16-byte header is no piece, but is checked all the same: a transfer that damaged
// it is not written (a copy with a foreign header would only be refused when read again).
TEST_F(DiskCacheTest, ADamagedHeaderIsNeverKept) {
  const uint32_t r = jpeg_with(3).record;
  const uint64_t len = full_len(r);
  auto source = fid::storage::make_disk_cached_source(store(), std::make_unique<DamagedOnceSource>(*local_, 9),
                                                      cache_dir(), 64 << 20, kIdentity);
  DiskCache* disk = fid::storage::as_disk_cache(*source);
  EXPECT_NE(read_prefix(*source, r, len), file_bytes(r, 0, len));
  disk->flush();
  EXPECT_FALSE(fs::exists(entry(r)));
  EXPECT_EQ(disk->disk_stats().dropped, 1u);
  EXPECT_EQ(read_prefix(*source, r, len), file_bytes(r, 0, len));  // the damage has passed
  disk->flush();
  EXPECT_EQ(fs::file_size(entry(r)), len);
}

TEST_F(DiskCacheTest, AnUnusableFolderFailsNoRead) {
  std::ofstream(dir_.path() / "a-file") << "x";
  Cached c = cached(64 << 20, dir_.path() / "a-file" / "cache");  // cannot be made
  for (const auto& r : store().records()) {
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
    EXPECT_EQ(read_range(*c.source, r.id, 16, 32), file_bytes(r.id, 16, 32));
  }
  c.disk->flush();
  EXPECT_GE(c.disk->disk_stats().errors, 1u);
  EXPECT_EQ(c.disk->disk_stats().hits, 0u);
  EXPECT_NE(c.source->describe().find("no disk cache"), std::string::npos);
}

TEST_F(DiskCacheTest, AFolderThatCannotBeWrittenFailsNoRead) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only folders";
  fs::create_directories(cache_dir() / kIdentity);
  fs::permissions(cache_dir() / kIdentity, fs::perms::owner_read | fs::perms::owner_exec);
  Cached c = cached(64 << 20);
  for (const auto& r : store().records())
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
  c.disk->flush();
  EXPECT_GE(c.disk->disk_stats().errors, store().records().size());
  fs::permissions(cache_dir() / kIdentity, fs::perms::owner_all);
}

// What another local user can do to the folder (the mount may be root's, with allow_other): the
// folders and files the cache makes are private whatever the umask; a folder another user owns,
// or could write to, is refused (reads go to the source); symbolic links (and a FIFO) planted
// under every name the cache uses are never followed: their targets stay as they were and every
// read returns the record's bytes.
mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// Sets the umask for one scope.
struct Umask {
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
  mode_t old;
};

TEST_F(DiskCacheTest, FoldersAre0700AndFiles0600WhateverTheUmask) {
  Umask open_umask(0);
  Cached c = cached(64 << 20, cache_dir() / "made" / "here");
  for (const auto& r : store().records()) read_prefix(*c.source, r.id, full_len(r.id));
  c.disk->flush();
  EXPECT_EQ(mode_of(cache_dir()), 0700u);
  EXPECT_EQ(mode_of(cache_dir() / "made"), 0700u);
  EXPECT_EQ(mode_of(cache_dir() / "made" / "here"), 0700u);
  EXPECT_EQ(mode_of(cache_dir() / "made" / "here" / kIdentity), 0700u);
  EXPECT_EQ(mode_of(cache_dir() / "made" / "here" / ".lock"), 0600u);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(cache_dir() / "made" / "here" / kIdentity)) {
    EXPECT_EQ(mode_of(e.path()), 0600u) << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, store().records().size());
}

TEST_F(DiskCacheTest, AFolderOthersCanWriteToIsRefused) {
  fs::create_directories(cache_dir());
  ASSERT_EQ(::chmod(cache_dir().c_str(), 0777), 0);
  Cached c = cached(64 << 20);
  for (const auto& r : store().records())
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
  c.disk->flush();
  const std::string why = c.source->describe();
  EXPECT_NE(why.find(cache_dir().string() + ": writable by other users (mode 0777) without the sticky bit; refusing"),
            std::string::npos) << why;
  EXPECT_TRUE(fs::is_empty(cache_dir()));  // nothing written into it
  EXPECT_EQ(mode_of(cache_dir()), 0777u);  // nor changed
  EXPECT_EQ(c.disk->disk_stats().hits, 0u);

  // A store's folder inside a good one, made by someone else who could write to it, likewise.
  ASSERT_EQ(::chmod(cache_dir().c_str(), 0700), 0);
  fs::create_directories(cache_dir() / kIdentity);
  ASSERT_EQ(::chmod((cache_dir() / kIdentity).c_str(), 0770), 0);
  Cached d = cached(64 << 20);
  EXPECT_NE(d.source->describe().find("writable by other users (mode 0770)"), std::string::npos) << d.source->describe();
}

TEST_F(DiskCacheTest, AFolderOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a folder to another user needs root";
  fs::create_directories(cache_dir());
  ASSERT_EQ(::chown(cache_dir().c_str(), 65534, 65534), 0);
  Cached c = cached(64 << 20);
  for (const auto& r : store().records())
    EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id)));
  c.disk->flush();
  EXPECT_NE(c.source->describe().find(cache_dir().string() + ": owned by uid 65534, not by this user (uid 0) or root"),
            std::string::npos) << c.source->describe();
  EXPECT_TRUE(fs::is_empty(cache_dir()));
  // A symbolic link to a good folder, made by that user: not followed either.
  const fs::path link = dir_.path() / "link";
  fs::create_directory_symlink(cache_dir(), link);
  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(cache_dir().c_str(), 0, 0), 0);
  Cached d = cached(64 << 20, link);
  EXPECT_NE(d.source->describe().find(link.string() + ": a symbolic link owned by uid 65534"), std::string::npos)
      << d.source->describe();
}

TEST_F(DiskCacheTest, AStickyFolderOthersCanWriteToIsUsed) {
  fs::create_directories(cache_dir());
  ASSERT_EQ(::chmod(cache_dir().c_str(), 01777), 0);  // as /tmp: others cannot remove what is ours
  Cached c = cached(64 << 20);
  const uint32_t r = 0;
  read_prefix(*c.source, r, full_len(r));
  c.disk->flush();
  EXPECT_EQ(read_prefix(*c.source, r, full_len(r)), file_bytes(r, 0, full_len(r)));
  EXPECT_EQ(c.disk->disk_stats().hits, 1u);
  EXPECT_EQ(mode_of(cache_dir()), 01777u);
  EXPECT_EQ(mode_of(cache_dir() / kIdentity), 0700u);
}

TEST_F(DiskCacheTest, SymbolicLinksInTheFolderAreNeverFollowed) {
  // The folders, as a first mount leaves them.
  { Cached first = cached(64 << 20); }
  const fs::path outside = dir_.path() / "outside";
  fs::create_directories(outside / "store-b");
  const std::string secret = "not the cache's to touch";
  std::ofstream(outside / "target") << secret;
  std::ofstream(outside / "store-b" / "0.p") << secret;
  std::ofstream(outside / "store-b" / ".tmp-4194305-1-0") << secret;  // a "dead writer's" temp file
  const auto target_mtime = fs::last_write_time(outside / "target");
  // Every name the cache uses: each record's entry, the lock, and a store folder.
  for (const auto& r : store().records()) fs::create_symlink(outside / "target", entry(r.id));
  fs::remove(cache_dir() / ".lock");
  fs::create_symlink(outside / "lock", cache_dir() / ".lock");
  fs::create_directory_symlink(outside / "store-b", cache_dir() / "store-b");
  // And a FIFO in place of one entry: a read must not wait for a writer.
  const uint32_t fifo_record = store().records().back().id;
  fs::remove(entry(fifo_record));
  ASSERT_EQ(::mkfifo(entry(fifo_record).c_str(), 0600), 0);

  uint64_t total = 0;
  for (const auto& r : store().records()) total += full_len(r.id);
  Cached c = cached(total - full_len(0) / 2);  // too small for all: evicts (and so scans) too
  for (int round = 0; round < 2; ++round)
    for (const auto& r : store().records()) {
      EXPECT_EQ(read_prefix(*c.source, r.id, full_len(r.id)), file_bytes(r.id, 0, full_len(r.id))) << r.path;
      EXPECT_EQ(read_range(*c.source, r.id, 16, 32), file_bytes(r.id, 16, 32)) << r.path;
      EXPECT_LE(c.source->local_copy_len(r.id), full_len(r.id));
      c.disk->flush();
    }
  EXPECT_GE(c.disk->disk_stats().evictions, 1u);
  // The targets are as they were; nothing was made where the links point.
  std::ifstream in(outside / "target");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), secret);
  EXPECT_EQ(fs::last_write_time(outside / "target"), target_mtime);  // not even touched
  EXPECT_TRUE(fs::exists(outside / "store-b" / "0.p"));
  EXPECT_TRUE(fs::exists(outside / "store-b" / ".tmp-4194305-1-0"));
  EXPECT_FALSE(fs::exists(outside / "lock"));
  EXPECT_TRUE(fs::is_symlink(cache_dir() / ".lock"));
  // The links in entries' places were replaced by copies (files), or are gone (evicted).
  for (const auto& r : store().records()) {
    EXPECT_FALSE(fs::is_symlink(entry(r.id))) << entry(r.id);
    if (fs::exists(entry(r.id))) {
      EXPECT_EQ(mode_of(entry(r.id)), 0600u);
    }
  }
}

// A range a copy holds is read from it with O_DIRECT into the thread's buffer; a range running
// past the copy's end comes from the source for the bytes the copy lacks.
TEST_F(DiskCacheTest, ReadScratchServesWhatACopyHolds) {
  Cached c = cached(64 << 20);
  const uint32_t r = scan_record();
  const uint64_t len = full_len(r);
  read_prefix(*c.source, r, len / 2);  // a copy of the first half
  c.disk->flush();
  const uint64_t copied = c.source->local_copy_len(r);
  ASSERT_GT(copied, 0u);
  ASSERT_LT(copied, len);
  const uint64_t fetched = c.counting->bytes();
  const uint64_t hits = c.disk->disk_stats().hits;
  int served = 0;
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{511}, uint64_t{512}, uint64_t{4097}, copied / 3})
    for (uint64_t n : {uint64_t{1}, uint64_t{100}, uint64_t{513}, uint64_t{8191}}) {
      if (off + n > copied) continue;
      auto got = c.source->read_scratch(r, off, n);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(std::vector<uint8_t>(got->begin(), got->end()), file_bytes(r, off, n)) << off << "+" << n;
      ++served;
    }
  auto last = c.source->read_scratch(r, copied - 7, 7);  // up to the copy's last byte
  ASSERT_TRUE(last.ok()) << last.error().message;
  EXPECT_EQ(std::vector<uint8_t>(last->begin(), last->end()), file_bytes(r, copied - 7, 7));
  EXPECT_EQ(c.counting->bytes(), fetched);  // all from the copy
  EXPECT_EQ(c.disk->disk_stats().hits, hits + served + 1);
  // Past the copy's end: the tail from the source.
  auto past = c.source->read_scratch(r, copied - 10, 30);
  ASSERT_TRUE(past.ok()) << past.error().message;
  EXPECT_EQ(std::vector<uint8_t>(past->begin(), past->end()), file_bytes(r, copied - 10, 30));
  EXPECT_EQ(c.counting->bytes(), fetched + 20);
}

// A copy stays open for the reads that follow; whatever happens to the file meanwhile (truncated,
// written, replaced or removed by another mount) the next read sees it and serves the right bytes.
TEST_F(DiskCacheTest, ACopyKeptOpenNoticesWhatHappensToIt) {
  Cached c = cached(64 << 20);
  const uint32_t r = scan_record();
  const uint64_t len = full_len(r);
  read_prefix(*c.source, r, len);
  c.disk->flush();
  auto scratch = [&](uint64_t off, uint64_t n) {
    auto got = c.source->read_scratch(r, off, n);
    EXPECT_TRUE(got.ok()) << got.error().message;
    return got ? std::vector<uint8_t>(got->begin(), got->end()) : std::vector<uint8_t>{};
  };
  EXPECT_EQ(scratch(len - 100, 100), file_bytes(r, len - 100, 100));
  uint64_t before = c.counting->bytes();
  // Truncated in place: the range past the new end comes from the source.
  fs::resize_file(entry(r), len / 2);
  EXPECT_EQ(scratch(len - 100, 100), file_bytes(r, len - 100, 100));
  EXPECT_EQ(c.counting->bytes(), before + 100);
  EXPECT_EQ(c.source->local_copy_len(r), len / 2);
  EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len));  // and a whole copy again
  c.disk->flush();
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  // Its header made foreign in place: not served, fetched and replaced.
  fid::testutil::flip_byte(entry(r), 8);
  before = c.counting->bytes();
  uint64_t errors = c.disk->disk_stats().errors;
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  EXPECT_EQ(c.counting->bytes(), before + 100);
  EXPECT_EQ(c.disk->disk_stats().errors, errors + 1);
  EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len));
  c.disk->flush();
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  // Replaced by another mount (a rename over it) with a copy that is not of this record.
  const fs::path other = entry(r).string() + ".other";
  fs::copy_file(entry(r), other);
  fid::testutil::flip_byte(other, 8);
  fs::rename(other, entry(r));
  before = c.counting->bytes();
  errors = c.disk->disk_stats().errors;
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  EXPECT_EQ(c.counting->bytes(), before + 100);
  EXPECT_EQ(c.disk->disk_stats().errors, errors + 1);
  // Removed by another mount's eviction: fetched.
  EXPECT_EQ(read_prefix(*c.source, r, len), file_bytes(r, 0, len));
  c.disk->flush();
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  fs::remove(entry(r));
  before = c.counting->bytes();
  EXPECT_EQ(scratch(8, 100), file_bytes(r, 8, 100));
  EXPECT_EQ(c.counting->bytes(), before + 100);
  EXPECT_EQ(c.source->local_copy_len(r), 0u);
}

// Descriptors of this process open on `path` (an open file keeps its space taken after unlink).
size_t descriptors_on(const fs::path& path) {
  size_t n = 0;
  for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    n += !ec && target.starts_with(path.string()) && target.ends_with(" (deleted)");
  }
  return n;
}

// Another mount evicts a copy this one holds open, and this one never reads that record again:
// the copy is closed once idle, so the eviction frees its space (within kReopenAfter and a
// writer wake-up, 2 s), also in a mount that never writes a copy.
TEST_F(DiskCacheTest, ACopyAnotherMountEvictsIsClosedWithoutAnotherRead) {
  const uint32_t r = scan_record();
  const uint64_t len = full_len(r);
  {
    Cached writer = cached(64 << 20);
    read_prefix(*writer.source, r, len);
    writer.disk->flush();
  }
  Cached c = cached(64 << 20);  // finds the copy; writes none
  EXPECT_EQ(read_range(*c.source, r, 8, 100), file_bytes(r, 8, 100));
  EXPECT_EQ(c.counting->bytes(), 0u) << "served by the copy";
  fs::remove(entry(r));
  EXPECT_GT(descriptors_on(entry(r)), 0u) << "held open after the eviction";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (descriptors_on(entry(r)) > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polls the outcome, bounded
  EXPECT_EQ(descriptors_on(entry(r)), 0u) << "the evicted copy is still open";
  EXPECT_EQ(read_range(*c.source, r, 8, 100), file_bytes(r, 8, 100));
  EXPECT_EQ(c.counting->bytes(), 100u);
}

// Bit rot in a copy already open: the reader's checksum finds it, the copy is dropped, and the
// file is read again from the source (file layout: its pieces are read in place).
class DiskCacheFileLayoutTest : public DiskCacheTest {
 protected:
  fid::index::StoreLayout layout() const override { return fid::index::StoreLayout::file; }
};

TEST_F(DiskCacheFileLayoutTest, ADamagedCopyReadInPlaceIsDroppedAndReadAgain) {
  const auto& victim = jpeg_with(3);
  const int L = store().levels();
  const auto range = fid::core::piece_range(store(), victim, L, 0, 1 << 20);
  ASSERT_TRUE(range.back_to_back);
  Cached c = cached(64 << 20);
  const uint64_t len = full_len(victim.record);
  read_prefix(*c.source, victim.record, len);
  c.disk->flush();
  auto good = fid::core::stored_span(store(), victim, range, *c.source, nullptr);
  ASSERT_TRUE(good.ok()) << good.error().message;
  const std::vector<uint8_t> expected(good->begin(), good->end());
  const uint64_t before = c.counting->bytes();
  fid::testutil::flip_byte(entry(victim.record), store().pieces(victim)[2].offset + 1);
  auto again = fid::core::stored_span(store(), victim, range, *c.source, nullptr);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(std::vector<uint8_t>(again->begin(), again->end()), expected);
  EXPECT_GT(c.counting->bytes(), before);  // from the source
  EXPECT_EQ(c.disk->disk_stats().dropped, 1u);
  EXPECT_FALSE(fs::exists(entry(victim.record)));
}

}  // namespace
