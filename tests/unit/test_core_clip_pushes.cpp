// A clip's frames pushed to the kernel's page cache (core/clip_pushes.h), without a mount: a
// recording kernel takes the stores. After a frame's READ, the frames after it that the kernel
// knows get exactly the bytes a READ of their inodes returns, once a level; a frame looked up
// later gets its own; a READ of a frame pushed before (evicted since) pushes the rest again; a
// level change pushes the new inodes' bytes; clip_push=off, a cap smaller than a frame,
// sequential frames and a kernel that refuses stores get none.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
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
using testutil::StoringKernel;

constexpr int kFrames = 8;
const core::Caller kOwner{1000, 1000, {}};

class ClipPushesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path src = dir_.path() / "src";
    for (const char* clip : {"a", "b"})
      for (int i = 1; i <= kFrames; ++i) {
        const std::vector<uint8_t> jpeg = testutil::make_jpeg(64, 48, static_cast<uint32_t>(i + 100 * clip[0]));
        testutil::write_file(src / "cls" / clip / fmt::format("img_{:05d}.jpg", i), std::string(jpeg.begin(), jpeg.end()));
      }
    pack::PackOptions opt = testutil::pack_options(src, dir_.path() / "store", 1 << 20);
    opt.layout = index::StoreLayout::file;
    std::atomic<bool> cancel{false};
    ASSERT_TRUE(pack::pack(opt, nullptr, cancel).ok());
    store_ = testutil::value_or_throw(index::Store::open(dir_.path() / "store"));
    ASSERT_EQ(store_->clip_runs().size(), 2u);
    source_ = std::make_unique<storage::LocalRecordSource>(*store_);
  }
  void mount(const config::Settings& settings) {
    if (fs_) fs_->detach();
    fs_ = std::make_unique<core::Filesystem>(*store_, *source_, settings, core::Filesystem::Options{"/mnt/t", nullptr, 1000, {}, {}});
    fs_->attach(&kernel_);
  }
  void TearDown() override {
    if (fs_) fs_->detach();
  }
  // A LOOKUP as the adapter answers it.
  uint64_t lookup(uint64_t parent, const std::string& name) {
    auto e = fs_->lookup(parent, name);
    EXPECT_TRUE(e.ok() && e->ino != 0) << name;
    if (!e.ok()) return 0;
    kernel_.note(e->ino);
    fs_->lookup_replied(e->ino);
    return e->ino;
  }
  uint64_t clip_dir(const char* clip) { return lookup(lookup(1, "cls"), clip); }
  std::string frame(int i) const { return fmt::format("img_{:05d}.jpg", i); }
  std::vector<uint8_t> read_all(uint64_t ino) {
    auto st = fs_->getattr(ino);
    EXPECT_TRUE(st.ok());
    auto r = fs_->read(ino, 0, static_cast<uint64_t>(st->st_size) + 1);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->to_vector() : std::vector<uint8_t>{};
  }
  uint64_t reading(const std::string& key) { return testutil::stats_value(*fs_, key); }

  testutil::TempDir dir_;
  std::unique_ptr<index::Store> store_;
  std::unique_ptr<storage::LocalRecordSource> source_;
  StoringKernel kernel_;
  std::unique_ptr<core::Filesystem> fs_;
};

TEST_F(ClipPushesTest, AReadPushesTheKnownFramesAfterItAndALookupItsOwn) {
  config::Settings settings;
  settings.scan_group = 5;
  mount(settings);
  // What a READ of an inode returns, from a mount that pushes nothing (an inode names its level).
  core::Filesystem plain(*store_, *source_, settings, core::Filesystem::Options{"/mnt/p", nullptr, 1000, {}, {}});
  const auto expected = [&](uint64_t ino) { return plain.read(ino, 0, 1 << 20)->to_vector(); };
  const uint64_t a = clip_dir("a");
  std::vector<uint64_t> ino(kFrames + 1);
  for (int i = 1; i < kFrames; ++i) ino[static_cast<size_t>(i)] = lookup(a, frame(i));  // the last one unknown
  fs_->wait_pushes();
  EXPECT_TRUE(kernel_.take().empty()) << "no run is cached yet";
  const std::vector<uint8_t> first = read_all(ino[1]);
  fs_->wait_pushes();
  std::map<uint64_t, std::vector<uint8_t>> stored = kernel_.take();
  ASSERT_EQ(stored.size(), static_cast<size_t>(kFrames - 2));  // frames 2 .. kFrames-1
  for (int i = 2; i < kFrames; ++i) {
    ASSERT_TRUE(stored.count(ino[static_cast<size_t>(i)])) << i;
    EXPECT_EQ(stored[ino[static_cast<size_t>(i)]], expected(ino[static_cast<size_t>(i)])) << i;
  }
  EXPECT_EQ(reading("pushed_frames"), static_cast<uint64_t>(kFrames - 2));
  // Frame 1 read again (it was not pushed) pushes nothing: the others are pushed at this level.
  read_all(ino[1]);
  fs_->wait_pushes();
  EXPECT_TRUE(kernel_.take().empty());
  // A READ of a pushed frame means its pages were evicted: the frames after it go again.
  read_all(ino[3]);
  fs_->wait_pushes();
  stored = kernel_.take();
  EXPECT_EQ(stored.size(), static_cast<size_t>(kFrames - 4));  // 4 .. kFrames-1
  EXPECT_TRUE(stored.count(ino[4]) && !stored.count(ino[2]));
  // A read not at the start pushes nothing; the last frame's lookup pushes its bytes.
  ASSERT_TRUE(fs_->read(ino[1], 100, 10).ok());
  fs_->wait_pushes();
  EXPECT_TRUE(kernel_.take().empty());
  ino[kFrames] = lookup(a, frame(kFrames));
  fs_->wait_pushes();
  stored = kernel_.take();
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[ino[kFrames]], expected(ino[kFrames]));
  // A level change: the frames' new inodes get the new level's bytes, from the lookups (where a
  // cached prefix holds level 2) or the first frame's read.
  ASSERT_TRUE(fs_->setxattr(a, "user.fidelity.scan_group", "2", 0, kOwner).ok());
  fs_->wait_invalidations();
  std::vector<uint64_t> now(kFrames + 1);
  for (int i = 1; i <= kFrames; ++i) now[static_cast<size_t>(i)] = lookup(a, frame(i));
  EXPECT_NE(now[2], ino[2]);
  fs_->wait_pushes();
  stored = kernel_.take();
  const std::vector<uint8_t> first2 = read_all(now[1]);
  EXPECT_LT(first2.size(), first.size());
  fs_->wait_pushes();
  stored.merge(kernel_.take());
  for (int i = 2; i <= kFrames; ++i) {
    ASSERT_TRUE(stored.count(now[static_cast<size_t>(i)])) << i;
    EXPECT_EQ(stored[now[static_cast<size_t>(i)]], expected(now[static_cast<size_t>(i)])) << i;
  }
  plain.detach();
}

// A loader without a listing, where the kernel serves the daemon's listing of a clip's folder from
// its cache (no inode made): it looks each frame up, then reads it. A clip's first READ has its
// folder listed; once the loader looks up a frame after its neighbour, the kernel is made to look
// up the rest, and every frame after the first two is pushed; a sparse loader (frames 1 and 3) has
// its folder listed and nothing looked up for it.
TEST_F(ClipPushesTest, AFrameLookedUpAfterItsNeighbourHasTheKernelLookUpTheRest) {
  config::Settings settings;
  mount(settings);
  kernel_.through = fs_.get();
  core::Filesystem plain(*store_, *source_, settings, core::Filesystem::Options{"/mnt/p", nullptr, 1000, {}, {}});
  // Each first frame's own lookup push is waited for, so that a slow push thread cannot push it
  // after the read below (the test's outcome does not depend on the threads' timing).
  const auto look_up_then_read = [&](uint64_t dir) {
    const uint64_t ino = lookup(dir, frame(1));
    fs_->wait_pushes();
    read_all(ino);
  };
  const uint64_t b = clip_dir("b");
  look_up_then_read(b);
  lookup(b, frame(3));
  fs_->wait_pushes();
  EXPECT_EQ(kernel_.listed, std::vector<std::string>{"cls/b"});  // at frame 1's READ
  EXPECT_TRUE(kernel_.known.empty());
  kernel_.take();
  const uint64_t a = clip_dir("a");
  look_up_then_read(a);
  lookup(a, frame(2));
  fs_->wait_pushes();
  std::vector<std::string> paths;
  for (int i = 3; i <= kFrames; ++i) paths.push_back("cls/a/" + frame(i));
  // The folder was listed at the first frame's READ, and again at the second's lookup (whose LOOKUP
  // means the first listing made no inode: the kernel served it from its cache).
  EXPECT_EQ(kernel_.listed, (std::vector<std::string>{"cls/b", "cls/a", "cls/a"}));
  EXPECT_EQ(kernel_.known, paths);
  const std::map<uint64_t, std::vector<uint8_t>> stored = kernel_.take();
  // Frames 1 and 2 by their own lookups (clip b's read loaded the record that holds both clips),
  // then 3..8 by the daemon's.
  EXPECT_EQ(stored.size(), static_cast<size_t>(kFrames));
  for (int i = 1; i <= kFrames; ++i) {
    const uint64_t ino = fs_->lookup(a, frame(i))->ino;
    ASSERT_TRUE(stored.count(ino)) << i;
    EXPECT_EQ(stored.at(ino), plain.read(ino, 0, 1 << 20)->to_vector()) << i;
  }
  EXPECT_EQ(reading("push_lookups"), static_cast<uint64_t>(kFrames - 2));
  // Once a run and level: the next lookup asks for nothing more.
  lookup(a, frame(3));
  fs_->wait_pushes();
  EXPECT_EQ(kernel_.known.size(), paths.size());
  EXPECT_EQ(kernel_.listed.size(), 3u);
  kernel_.through = nullptr;
  plain.detach();
}

// The same loader where the kernel lists the clip's folder with attributes: the listing at the
// first frame's READ makes every frame's inode, so nothing is looked up one by one, and every
// frame after the first is pushed with the bytes a READ returns (by that READ's window, or by the
// listing's job where the READ stopped waiting for it).
TEST_F(ClipPushesTest, AListingOfTheClipsFolderMakesItsFramesKnownWithoutALookupEach) {
  config::Settings settings;
  settings.scan_group = 3;
  mount(settings);
  kernel_.through = fs_.get();
  kernel_.lists = true;
  core::Filesystem plain(*store_, *source_, settings, core::Filesystem::Options{"/mnt/p", nullptr, 1000, {}, {}});
  const uint64_t a = clip_dir("a");
  const uint64_t first = lookup(a, frame(1));
  fs_->wait_pushes();
  read_all(first);  // the loader's next frames are names the kernel has: no LOOKUP
  fs_->wait_pushes();
  EXPECT_EQ(kernel_.listed, std::vector<std::string>{"cls/a"});
  EXPECT_TRUE(kernel_.known.empty());
  EXPECT_EQ(reading("push_listings"), 1u);
  EXPECT_EQ(reading("push_lookups"), 0u);
  const std::map<uint64_t, std::vector<uint8_t>> stored = kernel_.take();
  for (int i = 2; i <= kFrames; ++i) {
    const uint64_t ino = fs_->lookup(a, frame(i))->ino;
    ASSERT_TRUE(stored.count(ino)) << i;
    EXPECT_EQ(stored.at(ino), plain.read(ino, 0, 1 << 20)->to_vector()) << i;
  }
  kernel_.through = nullptr;
  plain.detach();
}

// After a level change of a clip's folder the kernel holds the new inode of a frame only once told
// of it: a READ at the new level pushes none of the frames it has not been told of (each would be
// a refused store), and a reader's next lookup has them made known and pushed.
TEST_F(ClipPushesTest, AfterALevelChangeOnlyTheNewInodesTheKernelHoldsArePushed) {
  config::Settings settings;
  settings.scan_group = 5;
  mount(settings);
  kernel_.strict = true;
  const uint64_t a = clip_dir("a");
  std::vector<uint64_t> ino;
  for (int i = 1; i <= kFrames; ++i) ino.push_back(lookup(a, frame(i)));
  fs_->wait_pushes();
  read_all(ino[0]);
  fs_->wait_pushes();
  ASSERT_EQ(kernel_.take().size(), static_cast<size_t>(kFrames - 1));
  ASSERT_TRUE(fs_->setxattr(a, "user.fidelity.scan_group", "2", 0, kOwner).ok());
  fs_->wait_invalidations();
  const uint64_t now1 = lookup(a, frame(1));
  ASSERT_NE(now1, ino[0]);
  fs_->wait_pushes();
  read_all(now1);
  fs_->wait_pushes();
  EXPECT_EQ(reading("push_refused"), 0u);
  kernel_.through = fs_.get();
  lookup(a, frame(2));
  fs_->wait_pushes();
  const std::map<uint64_t, std::vector<uint8_t>> stored = kernel_.take();
  for (int i = 2; i <= kFrames; ++i) EXPECT_TRUE(stored.count(fs_->lookup(a, frame(i))->ino)) << i;
  EXPECT_EQ(reading("push_refused"), 0u);
  kernel_.through = nullptr;
}

TEST_F(ClipPushesTest, OffACapBelowAFrameSequentialFramesAndARefusingKernelPushNothing) {
  const auto pushes_after_a_read = [&](const config::Settings& settings) {
    mount(settings);
    const uint64_t b = clip_dir("b");
    std::vector<uint64_t> ino;
    for (int i = 1; i <= kFrames; ++i) ino.push_back(lookup(b, frame(i)));
    fs_->wait_pushes();
    const int before = kernel_.calls;
    read_all(ino[0]);
    fs_->wait_pushes();
    lookup(b, frame(2));
    fs_->wait_pushes();
    kernel_.take();
    return static_cast<size_t>(kernel_.calls - before) - (kernel_.refuse ? 1 : 0);  // a refused try sends nothing
  };
  config::Settings settings;
  EXPECT_EQ(pushes_after_a_read(settings), static_cast<size_t>(kFrames - 1));  // after the read; the lookup's frame is pushed
  config::Settings off = settings;
  off.clip_push = false;
  EXPECT_EQ(pushes_after_a_read(off), 0u);
  config::Settings small = settings;
  small.clip_push_bytes = 100;
  EXPECT_EQ(pushes_after_a_read(small), 0u);
  config::Settings sequential = settings;
  sequential.encoding = config::Encoding::sequential;
  EXPECT_EQ(pushes_after_a_read(sequential), 0u);
  kernel_.refuse = ENOSYS;  // a kernel without stores: one refusal, then no more tries
  kernel_.calls = 0;
  EXPECT_EQ(pushes_after_a_read(settings), 0u);
  EXPECT_EQ(kernel_.calls, 1);
  EXPECT_EQ(reading("push_refused"), 1u);
}

}  // namespace
}  // namespace fid
