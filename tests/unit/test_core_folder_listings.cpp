// Folders listed ahead of a reader that looks their files up one by one (core/folder_listings.h),
// without a mount: a recording kernel takes the listings. A folder is listed once, when its files'
// LOOKUPs reach 1/64 of them (at least 2); folders looked into less, folders (not files) looked up,
// clip folders (ClipPushes lists those) and every folder under readdir=plain are not listed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/filesystem.h"
#include "pack/packer.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_stats.h"
#include "test_store_fixture.h"

namespace fid {
namespace {

namespace fs = std::filesystem;

class ListingKernel final : public core::KernelCache {
 public:
  Status forget_entry(uint64_t, std::string_view) override { return {}; }
  void forget_inode(uint64_t) override {}
  Status store(uint64_t, std::span<const uint8_t>, std::span<const uint8_t>) override { return {}; }
  Status make_known(std::span<const std::string>, const std::function<void(size_t)>&) override { return {}; }
  Status list_folder(const std::string& path, std::string_view) override {
    std::unique_lock lock(mu_);
    listed_.push_back(path);
    ++started_;
    started_cv_.notify_all();
    released_cv_.wait(lock, [&] { return !hold_; });
    return {};
  }
  // Listings wait until release() from now on.
  void hold() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      hold_ = false;
    }
    released_cv_.notify_all();
  }
  void wait_started(int n) {
    std::unique_lock lock(mu_);
    started_cv_.wait(lock, [&] { return started_ >= n; });
  }
  std::vector<std::string> listed() {
    std::lock_guard lock(mu_);
    return listed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable started_cv_, released_cv_;
  bool hold_ = false;
  int started_ = 0;
  std::vector<std::string> listed_;
};

// Folder "few" holds 3 files (listed at the second lookup), "many" 200 (listed at the third: 200 /
// 64), "clip" 3 frames of a clip.
class FolderListingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path src = dir_.path() / "src";
    const std::vector<uint8_t> jpeg = testutil::make_jpeg(16, 16, 7);
    for (int i = 0; i < 3; ++i) testutil::write_file(src / "few" / fmt::format("{}.jpg", i), std::string(jpeg.begin(), jpeg.end()));
    for (int i = 0; i < 200; ++i) testutil::write_file(src / "many" / fmt::format("{}.jpg", i), std::string(jpeg.begin(), jpeg.end()));
    for (int i = 1; i <= 3; ++i)
      testutil::write_file(src / "clip" / fmt::format("img_{:05d}.jpg", i), std::string(jpeg.begin(), jpeg.end()));
    pack::PackOptions opt = testutil::pack_options(src, dir_.path() / "store", 1 << 20);
    opt.clips = {pack::ClipRule::Mode::glob, "clip"};
    std::atomic<bool> cancel{false};
    ASSERT_TRUE(pack::pack(opt, nullptr, cancel).ok());
    store_ = testutil::value_or_throw(index::Store::open(dir_.path() / "store"));
    ASSERT_EQ(store_->clip_runs().size(), 1u);
    source_ = std::make_unique<storage::LocalRecordSource>(*store_);
  }
  void mount(const config::Settings& settings) {
    fs_ = std::make_unique<core::Filesystem>(*store_, *source_, settings, core::Filesystem::Options{"/mnt/t", nullptr, 1000, {}, {}});
    fs_->attach(&kernel_);
  }
  void TearDown() override {
    if (fs_) fs_->detach();
  }
  // A LOOKUP as the adapter answers it, then the listings it queued done.
  uint64_t lookup(uint64_t parent, const std::string& name) {
    auto e = fs_->lookup(parent, name);
    EXPECT_TRUE(e.ok() && e->ino != 0) << name;
    if (!e.ok()) return 0;
    fs_->lookup_replied(e->ino);
    fs_->wait_listings();
    return e->ino;
  }
  uint64_t reading(const std::string& key) { return testutil::stats_value(*fs_, key); }

  testutil::TempDir dir_;
  std::unique_ptr<index::Store> store_;
  std::unique_ptr<storage::LocalRecordSource> source_;
  ListingKernel kernel_;
  std::unique_ptr<core::Filesystem> fs_;
};

TEST_F(FolderListingsTest, AFolderIsListedOnceWhenItsFilesLookupsReachItsShare) {
  mount(config::Settings{});
  const uint64_t few = lookup(1, "few"), many = lookup(1, "many");
  lookup(few, "0.jpg");
  EXPECT_TRUE(kernel_.listed().empty());
  lookup(few, "1.jpg");
  EXPECT_EQ(kernel_.listed(), std::vector<std::string>{"few"});
  lookup(few, "2.jpg");
  lookup(many, "0.jpg");
  lookup(many, "1.jpg");
  EXPECT_EQ(kernel_.listed(), std::vector<std::string>{"few"});
  lookup(many, "2.jpg");
  EXPECT_EQ(kernel_.listed(), (std::vector<std::string>{"few", "many"}));
  for (int i = 3; i < 20; ++i) lookup(many, fmt::format("{}.jpg", i));
  const uint64_t clip = lookup(1, "clip");
  for (int i = 1; i <= 3; ++i) lookup(clip, fmt::format("img_{:05d}.jpg", i));
  lookup(1, "few");
  fs_->wait_pushes();
  // The clip's folder is listed by its pushes (core/clip_pushes.h), never ahead of its lookups.
  std::vector<std::string> ahead;
  for (const std::string& path : kernel_.listed())
    if (path != "clip") ahead.push_back(path);
  EXPECT_EQ(ahead, (std::vector<std::string>{"few", "many"}));
  EXPECT_EQ(reading("listed"), 2u);
}

// Lookups under /.fidelity/sg/K/ are of another tree than the live folders: none is listed.
TEST_F(FolderListingsTest, LookupsInALevelsViewListNothing) {
  mount(config::Settings{});
  const uint64_t view = lookup(lookup(lookup(1, ".fidelity"), "sg"), "3");
  const uint64_t few = lookup(view, "few");
  for (int i = 0; i < 3; ++i) lookup(few, fmt::format("{}.jpg", i));
  EXPECT_TRUE(kernel_.listed().empty());
  EXPECT_EQ(reading("listed"), 0u);
}

// A listing not started within kStale of its queueing is dropped: its reader has moved on. Here
// "many" waits behind "few", whose listing is held past that bound.
TEST_F(FolderListingsTest, AListingThatWaitedPastItsBoundIsDropped) {
  mount(config::Settings{});
  const uint64_t few = lookup(1, "few"), many = lookup(1, "many");
  kernel_.hold();
  fs_->lookup_replied(fs_->lookup(few, "0.jpg")->ino);
  fs_->lookup_replied(fs_->lookup(few, "1.jpg")->ino);
  kernel_.wait_started(1);
  for (int i = 0; i < 3; ++i) fs_->lookup_replied(fs_->lookup(many, fmt::format("{}.jpg", i))->ino);
  std::this_thread::sleep_for(core::FolderListings::kStale + std::chrono::milliseconds(20));  // ages the queued one
  kernel_.release();
  fs_->wait_listings();
  EXPECT_EQ(kernel_.listed(), std::vector<std::string>{"few"});
  EXPECT_EQ(reading("stale"), 1u);
}

TEST_F(FolderListingsTest, UnderReaddirPlainNothingIsListed) {
  config::Settings settings;
  settings.readdir = config::Readdir::plain;
  mount(settings);
  const uint64_t few = lookup(1, "few");
  for (int i = 0; i < 3; ++i) lookup(few, fmt::format("{}.jpg", i));
  EXPECT_TRUE(kernel_.listed().empty());
  EXPECT_EQ(reading("listed"), 0u);
}

}  // namespace
}  // namespace fid
