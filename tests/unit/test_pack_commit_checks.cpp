// What the store writers (pack, append, merge, relayout) check before they commit: the index they
// wrote loads with the loader's checks, or nothing is committed and the store is as it was; the
// source and the store never hold each other, symlinks included; a source that is one clip's
// folder of frames makes a store that opens, alone or appended.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "index/store.h"
#include "pack/append.h"
#include "pack/merge.h"
#include "pack/packer.h"
#include "pack/relayout.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_store_fixture.h"

namespace fid {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Every file under `dir` (relative path -> bytes): what "the store is as it was" compares.
std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    out[fs::relative(e.path(), dir).string()] = bytes.str();
  }
  return out;
}

class Writers : public ::testing::Test {
 protected:
  void add_jpeg(const fs::path& root, const std::string& rel, int w, int h, uint32_t seed) {
    const std::vector<uint8_t> jpeg = testutil::make_jpeg(w, h, seed);
    testutil::write_file(root / rel, std::string(jpeg.begin(), jpeg.end()));
  }
  // Four frames of one size named 00001.jpg ..., directly in `root`.
  void add_frames(const fs::path& root) {
    for (int i = 1; i <= 4; ++i) add_jpeg(root, fmt::format("{:05d}.jpg", i), 48, 32, static_cast<uint32_t>(i));
  }
  fs::path path(const std::string& name) const { return dir_.path() / name; }

  Result<pack::PackReport> pack_into(const fs::path& src, const fs::path& store, index::StoreLayout layout,
                                     pack::Shard shard = {}) {
    pack::PackOptions opt = testutil::pack_options(src, store, 16 << 10);
    opt.layout = layout;
    opt.shard = shard;
    return pack::pack(opt, nullptr, cancel_);
  }
  Result<pack::AppendReport> append_to(const fs::path& src, const fs::path& store) {
    pack::PackOptions opt = testutil::pack_options(src, store);
    if (Status taken = pack::take_store_options(opt, {}, store, store.string()); !taken) return std::move(taken).error();
    return pack::append(opt, pack::PackIo{}, nullptr, cancel_);
  }
  Result<pack::RelayoutReport> relayout_to(const fs::path& store_dir, const fs::path& out) {
    std::unique_ptr<index::Store> store = testutil::value_or_throw(index::Store::open(store_dir));
    pack::RelayoutIo io;
    io.index_file = store_dir / "index.sqlite";
    io.read_records = [&](std::span<const uint32_t> ids, std::span<uint8_t* const> buffers) -> Status {
      for (size_t k = 0; k < ids.size(); ++k) {
        const index::Record& r = store->records()[ids[k]];
        std::ifstream in(store_dir / r.path, std::ios::binary);
        in.read(reinterpret_cast<char*>(buffers[k]), static_cast<std::streamsize>(r.size));
        if (!in) return Error{EIO, r.path + ": short"};
      }
      return {};
    };
    return pack::relayout(*store, index::StoreLayout::scan, out, io, nullptr, cancel_);
  }

  testutil::TempDir dir_;
  std::atomic<bool> cancel_{false};
};

// The failure that a writer's bug would be, made by the test hook: each writer fails with
// "internal error", naming the loader's reason, and leaves no store, or the store as it was.
TEST_F(Writers, AnIndexTheLoaderRefusesIsNeverCommitted) {
  const fs::path src = path("src");
  for (int i = 0; i < 6; ++i) add_jpeg(src, fmt::format("c{}/{}.jpg", i % 2, i), 40 + 4 * i, 30, static_cast<uint32_t>(i));
  const std::string bad = "UPDATE files SET dir = 4000000 WHERE id = 0";
  const auto refused = [&](const Error& e) {
    EXPECT_EQ(e.code, EIO);
    EXPECT_EQ(e.message.rfind("internal error: ", 0), 0u) << e.message;
    EXPECT_NE(e.message.find("file 0 in unknown directory 4000000"), std::string::npos) << e.message;
  };
  {
    const ScopedEnv hook("FIDELITYFS_TEST_INDEX_SQL", "pack:" + bad);
    Result<pack::PackReport> packed = pack_into(src, path("packed"), index::StoreLayout::file);
    ASSERT_FALSE(packed);
    refused(packed.error());
    EXPECT_FALSE(fs::exists(path("packed")));
  }
  ASSERT_TRUE(pack_into(src, path("store"), index::StoreLayout::file));
  add_jpeg(path("more"), "c2/new.jpg", 64, 48, 99);
  const std::map<std::string, std::string> before = contents(path("store"));
  {
    const ScopedEnv hook("FIDELITYFS_TEST_INDEX_SQL", "append:" + bad);
    Result<pack::AppendReport> appended = append_to(path("more"), path("store"));
    ASSERT_FALSE(appended);
    refused(appended.error());
    EXPECT_EQ(contents(path("store")), before) << "the store changed";
  }
  {
    const ScopedEnv hook("FIDELITYFS_TEST_INDEX_SQL", "relayout:" + bad);
    Result<pack::RelayoutReport> relaid = relayout_to(path("store"), path("relaid"));
    ASSERT_FALSE(relaid);
    refused(relaid.error());
    EXPECT_FALSE(fs::exists(path("relaid")));
  }
  ASSERT_TRUE(pack_into(src, path("part0"), index::StoreLayout::file, pack::Shard{0, 2}));
  ASSERT_TRUE(pack_into(src, path("part1"), index::StoreLayout::file, pack::Shard{1, 2}));
  {
    const ScopedEnv hook("FIDELITYFS_TEST_INDEX_SQL", "merge:" + bad);
    Result<pack::MergeReport> merged = pack::merge({path("part0"), path("part1")}, path("merged"), cancel_);
    ASSERT_FALSE(merged);
    refused(merged.error());
    EXPECT_FALSE(fs::exists(path("merged")));
  }
  // Without the hook every writer commits, and each store opens.
  ASSERT_TRUE(append_to(path("more"), path("store")));
  ASSERT_TRUE(relayout_to(path("store"), path("relaid")));
  ASSERT_TRUE(pack::merge({path("part0"), path("part1")}, path("merged"), cancel_));
  for (const char* s : {"store", "relaid", "merged"}) EXPECT_TRUE(index::Store::open(path(s))) << s;
}

// A source that is one clip's folder of frames (the root) packs as plain files in either layout,
// and appends to a store as such: every store opens.
TEST_F(Writers, FramesInTheSourceRootAreNoClip) {
  add_frames(path("frames"));
  for (index::StoreLayout layout : {index::StoreLayout::file, index::StoreLayout::scan}) {
    const fs::path store = path(fmt::format("alone-{}", index::layout_name(layout)));
    Result<pack::PackReport> packed = pack_into(path("frames"), store, layout);
    ASSERT_TRUE(packed) << packed.error().message;
    EXPECT_EQ(packed->clips, 0u);
    Result<std::unique_ptr<index::Store>> opened = index::Store::open(store);
    ASSERT_TRUE(opened) << opened.error().message;
    EXPECT_EQ((*opened)->files().size(), 4u);
    EXPECT_TRUE((*opened)->clip_runs().empty());
  }
  add_jpeg(path("good"), "a/x.jpg", 40, 30, 7);
  ASSERT_TRUE(pack_into(path("good"), path("grown"), index::StoreLayout::file));
  Result<pack::AppendReport> appended = append_to(path("frames"), path("grown"));
  ASSERT_TRUE(appended) << appended.error().message;
  Result<std::unique_ptr<index::Store>> opened = index::Store::open(path("grown"));
  ASSERT_TRUE(opened) << opened.error().message;
  EXPECT_EQ((*opened)->files().size(), 5u);
}

// The source never holds the store being written, nor lies in it: spelled through the store's
// own folders, or reached through a symlink (which the walk skips, saying why).
TEST_F(Writers, TheSourceAndTheStoreNeverHoldEachOther) {
  add_jpeg(path("src"), "a/x.jpg", 40, 30, 1);
  ASSERT_TRUE(pack_into(path("src"), path("store"), index::StoreLayout::file));
  const std::map<std::string, std::string> before = contents(path("store"));
  for (const fs::path& inside : {path("store") / "records", path("store") / ".", path("store") / ".." / "store"}) {
    Result<pack::AppendReport> appended = append_to(inside, path("store"));
    ASSERT_FALSE(appended) << inside;
    EXPECT_EQ(appended.error().code, EINVAL) << appended.error().message;
    EXPECT_EQ(contents(path("store")), before) << inside;
  }
  // A symlink in the source to the store: skipped, the rest appended.
  add_jpeg(path("more"), "b/y.jpg", 40, 30, 2);
  fs::create_directory_symlink(path("store"), path("more") / "link");
  Result<pack::AppendReport> appended = append_to(path("more"), path("store"));
  ASSERT_TRUE(appended) << appended.error().message;
  ASSERT_EQ(appended->pack.skipped.size(), 1u);
  EXPECT_EQ(appended->pack.skipped[0].first, "link/");
  EXPECT_NE(appended->pack.skipped[0].second.find("the store being written"), std::string::npos);
  std::unique_ptr<index::Store> store = testutil::value_or_throw(index::Store::open(path("store")));
  EXPECT_EQ(store->files().size(), 2u);
  // A symlink to the store's parent folder: the temporary folder the store is written in is skipped.
  add_jpeg(path("up"), "c/z.jpg", 40, 30, 3);
  fs::create_directory_symlink(dir_.path(), path("up") / "parent");
  Result<pack::PackReport> packed = pack_into(path("up"), path("fresh"), index::StoreLayout::file);
  ASSERT_TRUE(packed) << packed.error().message;
  bool tmp_skipped = false;
  for (const auto& [rel, why] : packed->skipped)
    if (rel.rfind("parent/.fresh.tmp-", 0) == 0) tmp_skipped = why.find("the store being written") != std::string::npos;
  EXPECT_TRUE(tmp_skipped);
  EXPECT_TRUE(index::Store::open(path("fresh")));
}

}  // namespace
}  // namespace fid
