// Pushes only for frames a reader will read (core/clip_pushes.h), on one clip of 300 frames: a
// READ pushes a window that doubles while the reader reads on to its marker and starts again after
// a jump; short windows of a long clip push about what they read; a reader that bypasses the page
// cache (O_DIRECT) pushes nothing; a scan that looks up one frame lists nothing; a reader in turn
// deep in the clip has a window looked up, not the folder listed from its start.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/filesystem.h"
#include "pack/packer.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_stats.h"
#include "test_store_fixture.h"
#include "test_storing_kernel.h"

namespace fid {
namespace {

namespace fs = std::filesystem;

constexpr int kFrames = 300;

class ClipWindowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path src = dir_.path() / "src";
    for (int i = 1; i <= kFrames; ++i) {
      const std::vector<uint8_t> jpeg = testutil::make_jpeg(16, 16, static_cast<uint32_t>(i));
      testutil::write_file(src / "long" / frame(i), std::string(jpeg.begin(), jpeg.end()));
    }
    pack::PackOptions opt = testutil::pack_options(src, dir_.path() / "store", 1 << 20);
    opt.layout = index::StoreLayout::file;
    std::atomic<bool> cancel{false};
    ASSERT_TRUE(pack::pack(opt, nullptr, cancel).ok());
    store_ = testutil::value_or_throw(index::Store::open(dir_.path() / "store"));
    ASSERT_EQ(store_->clip_runs().size(), 1u);
    source_ = std::make_unique<storage::LocalRecordSource>(*store_);
    fs_ = std::make_unique<core::Filesystem>(*store_, *source_, config::Settings{},
                                             core::Filesystem::Options{"/mnt/t", nullptr, 1000, {}, {}});
    fs_->attach(&kernel_);
    kernel_.through = fs_.get();
    kernel_.lists = true;
    clip_ = fs_->lookup(1, "long")->ino;
  }
  void TearDown() override { fs_->detach(); }
  static std::string frame(int i) { return fmt::format("img_{:05d}.jpg", i); }
  // A LOOKUP as the adapter answers it.
  uint64_t lookup(int i) {
    auto e = fs_->lookup(clip_, frame(i));
    EXPECT_TRUE(e.ok() && e->ino != 0) << i;
    kernel_.note(e->ino);
    fs_->lookup_replied(e->ino);
    return e->ino;
  }
  uint64_t ino(int i) { return fs_->lookup(clip_, frame(i))->ino; }
  // The whole clip made known as a listing of the reader's own makes it.
  void list_all() { ASSERT_TRUE(kernel_.list_folder("long", "").ok()); }
  // A READ of frame i from its start, through the page cache or not; the pushes it queued done.
  void read(int i, bool page_cache = true) {
    ASSERT_TRUE(fs_->read(ino(i), 0, 1 << 20, page_cache).ok());
    fs_->wait_pushes();
  }
  // The frames pushed since the last call, by number.
  std::set<int> pushed() {
    std::set<int> out;
    const std::map<uint64_t, std::vector<uint8_t>> stored = kernel_.take();
    for (int i = 1; i <= kFrames; ++i)
      if (stored.count(ino(i))) out.insert(i);
    return out;
  }
  static std::set<int> range(int first, int last) {
    std::set<int> out;
    for (int i = first; i <= last; ++i) out.insert(i);
    return out;
  }
  static std::set<int> without(std::set<int> frames, int marker) {
    frames.erase(marker);
    return frames;
  }
  uint64_t reading(const std::string& key) { return testutil::stats_value(*fs_, key); }

  testutil::TempDir dir_;
  std::unique_ptr<index::Store> store_;
  std::unique_ptr<storage::LocalRecordSource> source_;
  testutil::StoringKernel kernel_;
  std::unique_ptr<core::Filesystem> fs_;
  uint64_t clip_ = 0;
};

// Each window leaves its marker (a quarter of it before its end) unpushed: the reader's READ of it
// queues the next window, twice as large, while the rest of the window is still ahead of it.
TEST_F(ClipWindowsTest, AWindowDoublesAtItsMarkerAndStartsAgainAfterAJump) {
  list_all();
  read(1);
  EXPECT_EQ(pushed(), without(range(2, 17), 14));
  read(14);  // the reader read 2..13 from the page cache
  EXPECT_EQ(pushed(), without(range(18, 46), 39));
  read(39);
  EXPECT_EQ(pushed(), without(range(47, 103), 88));
  read(200);
  EXPECT_EQ(pushed(), without(range(201, 216), 213));
}

// Four 32-frame windows of the long clip, read as a loader reads them: a frame pushed is read from
// the page cache (no READ), any other with a READ. Each window costs 2 READs (its first frame and
// the first window's marker) and pushes 43 frames.
TEST_F(ClipWindowsTest, ShortWindowsOfALongClipPushAboutWhatTheyRead) {
  list_all();
  std::set<int> cached;
  int reads = 0;
  for (int start : {1, 70, 140, 210})
    for (int i = start; i < start + 32; ++i) {
      if (cached.count(i)) continue;
      read(i);
      ++reads;
      const std::set<int> now = pushed();
      cached.insert(now.begin(), now.end());
    }
  EXPECT_EQ(reads, 8);
  EXPECT_EQ(reading("pushed_frames"), 4u * 43u);
  EXPECT_LE(reading("pushed_frames"), 2u * 4u * 32u);  // the stated bound: 2n + 16 a jump
}

TEST_F(ClipWindowsTest, AReaderThatBypassesThePageCachePushesNothing) {
  list_all();
  for (int i = 1; i <= 64; ++i) read(i, false);
  EXPECT_TRUE(pushed().empty());
  read(1);  // a buffered reader still gets its window
  EXPECT_EQ(pushed(), without(range(2, 17), 14));
  for (int i = 2; i <= 17; ++i) read(i, false);  // pushed frames read again with O_DIRECT
  EXPECT_TRUE(pushed().empty());
}

TEST_F(ClipWindowsTest, AScanThatLooksUpOneFrameListsAndLooksUpNothing) {
  lookup(1);
  lookup(150);
  fs_->wait_pushes();
  EXPECT_TRUE(kernel_.listed.empty());
  EXPECT_TRUE(kernel_.known.empty());
}

// Listed up to the clip's 256th frame: a listing makes dozens of inodes a request, so a clip's
// first 256 frames cost a request or two, and no more inodes are made.
TEST_F(ClipWindowsTest, AReaderInTurnNearTheStartHasTheFolderListedUpTo256Frames) {
  lookup(1);
  lookup(2);
  fs_->wait_pushes();
  EXPECT_EQ(kernel_.listed, std::vector<std::string>{"long"});
  EXPECT_TRUE(kernel_.known.empty());
  EXPECT_TRUE(kernel_.inodes.count(ino(256)));
  EXPECT_FALSE(kernel_.inodes.count(ino(257)));
}

// A READ of a frame whose next one the kernel does not know has the folder listed too, while the
// READ is answered (a loader that builds paths: its first READ comes before its second lookup).
TEST_F(ClipWindowsTest, AReadOfAFrameWhoseNextIsUnknownHasTheFolderListed) {
  read(1);
  fs_->wait_pushes();
  EXPECT_EQ(kernel_.listed, std::vector<std::string>{"long"});
  read(3);  // known now: nothing listed again
  EXPECT_EQ(kernel_.listed, std::vector<std::string>{"long"});
}

TEST_F(ClipWindowsTest, AReaderInTurnDeepInTheClipHasAWindowLookedUpNotTheFolderListed) {
  lookup(281);
  lookup(282);
  fs_->wait_pushes();
  EXPECT_TRUE(kernel_.listed.empty());
  std::vector<std::string> window;
  for (int i = 283; i <= 298; ++i) window.push_back("long/" + frame(i));
  EXPECT_EQ(kernel_.known, window);
}

}  // namespace
}  // namespace fid
