// LocalRecordSource: the ranges of a batch read together (io_uring where the kernel allows it)
// give the bytes in the record files, a batch larger than the ring too, one unreadable record
// fails only its own ranges, and the forced pread fallback behaves identically. A missing or
// foreign record file is a problem naming the file. Prefix reads. A ring that fails (a wait, a
// refused submit, completions that cannot be reaped) neither hangs a batch nor loses a read.
// A batch larger than the bounce buffer (a range of a big record) is still one read a range, and
// the thread keeps no buffer of its size afterwards; the larger buffer it gave back serves the
// next read that needs one.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <vector>

#include "storage/direct_read.h"
#include "storage/local_record_source.h"
#include "test_store_fixture.h"

using fid::index::FileKind;
using fid::storage::LocalRecordSource;
using fid::storage::RangeRead;

namespace {

class LocalSourceTest : public fid::testutil::PackedStore {
 protected:
  using Pieces = std::vector<std::pair<const fid::index::File*, uint32_t>>;
  // A range for each piece, into got[k] (filled with 0xAA first).
  std::vector<RangeRead> batch_of(const Pieces& pieces, std::vector<std::vector<uint8_t>>& got) const {
    got.assign(pieces.size(), {});
    std::vector<RangeRead> batch;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const auto& [f, i] = pieces[k];
      got[k].assign(store().pieces(*f)[i].size, 0xAA);
      batch.push_back({f->record, store().pieces(*f)[i].offset, got[k], {}});
    }
    return batch;
  }
  // Every piece of every file as a range, in reverse order of the store's pieces.
  std::vector<std::pair<const fid::index::File*, uint32_t>> all_pieces() const {
    std::vector<std::pair<const fid::index::File*, uint32_t>> out;
    for (const auto& f : store().files())
      for (uint32_t i = 0; i < f.piece_count; ++i) out.emplace_back(&f, i);
    return {out.rbegin(), out.rend()};
  }
};

TEST_F(LocalSourceTest, BatchesGiveTheRecordBytesWithAndWithoutIoUring) {
  auto pieces = all_pieces();
  ASSERT_GT(pieces.size(), 150u);  // larger than one ring (64 in flight)
  for (bool uring : {true, false}) {
    LocalRecordSource src(store(), uring);
    EXPECT_EQ(src.uses_io_uring(), uring && LocalRecordSource::io_uring_available().ok());
    EXPECT_TRUE(src.problems().empty());
    std::vector<std::vector<uint8_t>> got;
    std::vector<RangeRead> batch = batch_of(pieces, got);
    src.read_ranges(batch);
    for (size_t k = 0; k < pieces.size(); ++k) {
      ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
      EXPECT_EQ(got[k], raw_piece(*pieces[k].first, pieces[k].second)) << k;
    }
    EXPECT_EQ(src.counters().requests.load(), pieces.size());  // one storage read per range
  }
}

// A ring whose wait fails in mid-batch (reads still in flight): every read it had submitted is
// reaped (cancelled or done) before the batch returns, so none lands in the buffer afterwards;
// the batch still gives every range its bytes (the rest preaded), and the next batch sets up a
// new ring.
std::atomic<int> g_waits{0}, g_reaped{0}, g_fail_at{0};
int failing_wait(io_uring* ring, io_uring_cqe** cqe) {
  if (++g_waits == g_fail_at.load()) return -EIO;
  const int r = io_uring_wait_cqe(ring, cqe);
  if (r == 0 && io_uring_cqe_get_data64(*cqe) != UINT64_MAX) ++g_reaped;
  return r;
}

TEST_F(LocalSourceTest, AFailingRingIsDrainedAndRebuilt) {
  if (!LocalRecordSource::io_uring_available().ok()) GTEST_SKIP() << "no io_uring here";
  auto pieces = all_pieces();
  LocalRecordSource src(store(), true);
  LocalRecordSource::ring_wait_for_tests = failing_wait;
  for (int round = 0; round < 2; ++round) {
    g_waits = 0;
    g_reaped = 0;
    g_fail_at = round == 0 ? 2 : 0;  // the first batch's ring fails at its second wait
    std::vector<std::vector<uint8_t>> got;
    std::vector<RangeRead> batch = batch_of(pieces, got);
    src.read_ranges(batch);
    for (size_t k = 0; k < pieces.size(); ++k) {
      ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
      EXPECT_EQ(got[k], raw_piece(*pieces[k].first, pieces[k].second)) << round << " " << k;
    }
    if (g_waits == 0) {
      LocalRecordSource::ring_wait_for_tests = nullptr;
      GTEST_SKIP() << "the ring is not used here (no O_DIRECT on this filesystem)";
    }
    if (round == 0) EXPECT_EQ(g_reaped.load(), 64) << "reads of the failed ring left in flight";  // one ring's worth
    else EXPECT_EQ(g_reaped.load(), static_cast<int>(pieces.size()));  // a new ring did them all
  }
  LocalRecordSource::ring_wait_for_tests = nullptr;
}

// A submit the kernel refuses (-EAGAIN: its queue is full) with a whole ring of reads prepared:
// the batch neither hangs nor loses a read, and the thread's next batch gets a new ring. Run in a
// thread of its own, bounded: a hang fails the test instead of holding the suite.
std::atomic<int> g_submits{0}, g_refuse_at{0};
int refusing_submit(io_uring* ring) {
  if (++g_submits == g_refuse_at.load()) return -EAGAIN;
  return io_uring_submit(ring);
}
int never_waits(io_uring*, io_uring_cqe**) { return -EIO; }

TEST_F(LocalSourceTest, ARefusedSubmitNeitherHangsNorLosesARead) {
  if (!LocalRecordSource::io_uring_available().ok()) GTEST_SKIP() << "no io_uring here";
  auto pieces = all_pieces();
  ASSERT_GT(pieces.size(), 64u);  // the first chunk fills the ring
  LocalRecordSource src(store(), true);
  LocalRecordSource::ring_submit_for_tests = refusing_submit;
  g_submits = 0;
  g_refuse_at = 1;
  std::vector<std::vector<uint8_t>> got1, got2;
  std::vector<RangeRead> batch1 = batch_of(pieces, got1), batch2 = batch_of(pieces, got2);
  auto done = std::async(std::launch::async, [&] {
    src.read_ranges(batch1);  // its first submit is refused
    src.read_ranges(batch2);  // a new ring
  });
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "a batch hangs after a refused submit";
    std::_Exit(1);  // the hung thread cannot be joined
  }
  LocalRecordSource::ring_submit_for_tests = nullptr;
  if (g_submits == 0) GTEST_SKIP() << "the ring is not used here (no O_DIRECT on this filesystem)";
  EXPECT_GT(g_submits.load(), 2) << "the second batch used a ring again";
  for (auto* b : {&batch1, &batch2})
    for (size_t k = 0; k < pieces.size(); ++k) ASSERT_TRUE((*b)[k].status.ok()) << (*b)[k].status.error().message;
  for (size_t k = 0; k < pieces.size(); ++k) {
    EXPECT_EQ(got1[k], raw_piece(*pieces[k].first, pieces[k].second)) << k;
    EXPECT_EQ(got2[k], raw_piece(*pieces[k].first, pieces[k].second)) << k;
  }
}

// A ring whose completions cannot be waited for at all: its reads may land in the bounce buffer
// at any time, so the batch leaves that buffer for good and reads every range buffered, straight
// into its destination: the right bytes, in bounded time.
TEST_F(LocalSourceTest, ARingThatCannotBeReapedLeavesItsBufferBehind) {
  if (!LocalRecordSource::io_uring_available().ok()) GTEST_SKIP() << "no io_uring here";
  auto pieces = all_pieces();
  LocalRecordSource src(store(), true);
  LocalRecordSource::ring_wait_for_tests = never_waits;
  std::vector<std::vector<uint8_t>> got;
  std::vector<RangeRead> batch = batch_of(pieces, got);
  auto done = std::async(std::launch::async, [&] { src.read_ranges(batch); });
  const bool ready = done.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  LocalRecordSource::ring_wait_for_tests = nullptr;
  ASSERT_TRUE(ready) << "the batch did not end";
  for (size_t k = 0; k < pieces.size(); ++k) {
    ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
    EXPECT_EQ(got[k], raw_piece(*pieces[k].first, pieces[k].second)) << k;
  }
}

TEST_F(LocalSourceTest, AnUnreadableRecordFailsOnlyItsRanges) {
  const auto& victim = jpeg_with(3);
  std::filesystem::resize_file(path() / store().records()[victim.record].path, 100);  // truncated
  for (bool uring : {true, false}) {
    LocalRecordSource src(store(), uring);
    ASSERT_EQ(src.problems().size(), 1u);
    EXPECT_NE(src.problems()[0].find("truncated"), std::string::npos) << src.problems()[0];
    std::vector<std::vector<uint8_t>> got;
    std::vector<RangeRead> batch;
    std::vector<const fid::index::File*> owner;
    for (const auto& f : store().files()) {
      got.emplace_back(store().pieces(f)[0].size);
      owner.push_back(&f);
    }
    for (size_t k = 0; k < owner.size(); ++k) batch.push_back({owner[k]->record, store().pieces(*owner[k])[0].offset, got[k], {}});
    src.read_ranges(batch);
    for (size_t k = 0; k < owner.size(); ++k) {
      if (owner[k]->record == victim.record) {
        ASSERT_FALSE(batch[k].status.ok());
        EXPECT_EQ(batch[k].status.error().code, EIO);
        EXPECT_NE(batch[k].status.error().message.find(store().records()[victim.record].path), std::string::npos);
      } else {
        ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
        EXPECT_EQ(got[k], raw_piece(*owner[k], 0));
      }
    }
  }
}

TEST_F(LocalSourceTest, AMissingOrForeignRecordIsAProblemNamingItsFile) {
  const auto& records = store().records();
  ASSERT_GE(records.size(), 3u);
  std::filesystem::remove(path() / records[0].path);
  // In the place of record `foreign`, the largest other record: long enough, but its header names another id.
  const auto largest = std::max_element(records.begin() + 1, records.end(), [](const auto& x, const auto& y) { return x.size < y.size; });
  const auto& foreign = records[largest == records.begin() + 1 ? 2 : 1];
  std::filesystem::copy_file(path() / largest->path, path() / foreign.path, std::filesystem::copy_options::overwrite_existing);
  LocalRecordSource src(store());
  ASSERT_EQ(src.problems().size(), 2u);
  EXPECT_EQ(src.problems()[0], (path() / records[0].path).string() + ": No such file or directory");
  EXPECT_EQ(src.problems()[1], fmt::format("{}: not record {} of this store (bad header)", (path() / foreign.path).string(), foreign.id));
  std::vector<uint8_t> buf(16);
  for (uint32_t id : {records[0].id, foreign.id}) {
    RangeRead r{id, 0, buf, {}};
    src.read_ranges({&r, 1});
    ASSERT_FALSE(r.status.ok());
    EXPECT_EQ(r.status.error().code, EIO);
  }
}

// A store whose one big file (a blob of 900,001 bytes) fills a record of its own.
class BigRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path src = dir_.path() / "src";
    std::filesystem::create_directories(src / "a");
    std::mt19937 rng(7);
    blob_.resize(900001);
    for (uint8_t& b : blob_) b = static_cast<uint8_t>(rng());
    std::ofstream(src / "a" / "big.bin", std::ios::binary).write(reinterpret_cast<const char*>(blob_.data()), static_cast<std::streamsize>(blob_.size()));
    const auto jpeg = fid::testutil::make_jpeg(64, 48, 3);
    std::ofstream(src / "a" / "small.JPEG", std::ios::binary).write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    fid::pack::PackOptions opt;
    opt.sources = {src};
    opt.store = dir_.path() / "store";
    opt.jobs = 1;
    opt.record_bytes = 64 * 1024;
    std::atomic<bool> cancel{false};
    auto packed = fid::pack::pack(opt, nullptr, cancel);
    ASSERT_TRUE(packed.ok()) << packed.error().message;
    store_ = std::move(fid::index::Store::open(opt.store)).value();
  }
  fid::testutil::TempDir dir_;
  std::vector<uint8_t> blob_;
  std::unique_ptr<fid::index::Store> store_;
};

TEST_F(BigRecordTest, ABatchLargerThanTheBounceBufferReadsOnceARangeAndLeavesNoBufferOfItsSize) {
  const fid::index::File* big = nullptr;
  for (const auto& f : store_->files())
    if (store_->name(f) == "big.bin") big = &f;
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(store_->pieces(*big).size(), 1u);
  const uint64_t at = store_->pieces(*big)[0].offset;
  ASSERT_GT(store_->records()[big->record].size, 3 * fid::storage::kBounceBytes);
  for (bool uring : {true, false}) {
    LocalRecordSource src(*store_, uring);
    // Ranges of odd offsets and lengths: the whole blob less its ends, then many small ones, one
    // past the record's end.
    std::vector<std::vector<uint8_t>> got;
    std::vector<RangeRead> batch;
    got.emplace_back(blob_.size() - 4, 0xAA);
    for (int k = 0; k < 40; ++k) got.emplace_back(1000 + 37 * k, 0xAA);
    got.emplace_back(100, 0xAA);
    batch.push_back({big->record, at + 1, got[0], {}});
    for (int k = 0; k < 40; ++k) batch.push_back({big->record, at + 20011 * k + 3, got[1 + k], {}});
    batch.push_back({big->record, store_->records()[big->record].size - 50, got.back(), {}});
    src.read_ranges(batch);
    ASSERT_TRUE(batch[0].status.ok()) << batch[0].status.error().message;
    EXPECT_TRUE(std::equal(got[0].begin(), got[0].end(), blob_.begin() + 1));
    for (int k = 0; k < 40; ++k) {
      ASSERT_TRUE(batch[1 + k].status.ok()) << k;
      EXPECT_TRUE(std::equal(got[1 + k].begin(), got[1 + k].end(), blob_.begin() + 20011 * k + 3)) << k;
    }
    ASSERT_FALSE(batch.back().status.ok());
    EXPECT_EQ(batch.back().status.error().code, EIO);
    EXPECT_EQ(src.counters().requests.load(), batch.size()) << "uring " << uring << ": one read a range";
    EXPECT_LE(fid::storage::thread_scratch_size(), fid::storage::kBounceBytes) << "uring " << uring;
  }
}

// A larger bounce buffer given back waits for the next read that needs one (no fresh pages to
// fault in); the thread itself keeps only its own.
TEST(BounceBufferTest, ALargerBufferGivenBackServesTheNextLargerRead) {
  using fid::storage::kBounceBytes;
  uint8_t* own = fid::storage::thread_scratch(100);
  uint8_t* larger = fid::storage::thread_scratch(kBounceBytes + 4096);  // a spare another test gave back, or a new one
  ASSERT_NE(larger, nullptr);
  EXPECT_NE(larger, own);
  EXPECT_GE(fid::storage::thread_scratch_size(), 2 * kBounceBytes + 4096);
  fid::storage::give_back_large_scratch();
  EXPECT_EQ(fid::storage::thread_scratch_size(), kBounceBytes);
  EXPECT_EQ(fid::storage::thread_scratch(kBounceBytes + 1), larger);
  EXPECT_EQ(fid::storage::thread_scratch(50), own);  // gives the larger one back again
  EXPECT_EQ(fid::storage::thread_scratch_size(), kBounceBytes);
}

TEST_F(LocalSourceTest, PrefixReadsGiveTheRecordsFirstBytes) {
  LocalRecordSource src(store());
  for (const auto& r : store().records()) {
    const uint64_t len = std::min<uint64_t>(r.region_end.front() + 7, r.size);  // not a multiple of a sector
    uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (len + 4095) / 4096 * 4096));
    ASSERT_TRUE(src.read_prefix(r.id, len, buf).ok());
    std::ifstream in(path() / r.path, std::ios::binary);
    std::vector<uint8_t> want(len);
    in.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(len));
    EXPECT_EQ(std::vector<uint8_t>(buf, buf + len), want) << r.path;
    std::free(buf);
  }
}

}  // namespace
