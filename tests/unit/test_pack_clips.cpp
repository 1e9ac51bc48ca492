// Unit tests for clips: which folders pack takes for clips, the storage order that keeps each
// together, the store's clip runs (a run up to level k is one range), and reads of a clip's
// frames through the mount's read path: one storage read a clip at any level.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <numeric>
#include <thread>

#include "core/file_reader.h"
#include "core/read_range.h"
#include "index/sqlite_db.h"
#include "counting_source.h"
#include "pack/clips.h"
#include "pack/packer.h"
#include "sources/folder_source.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_store_fixture.h"

namespace fid {
namespace {

using pack::Clip;
using pack::ClipRule;
namespace fs = std::filesystem;

TEST(Clips, FramesSortInNaturalOrder) {
  EXPECT_TRUE(pack::natural_less("img_2.jpg", "img_10.jpg"));
  EXPECT_FALSE(pack::natural_less("img_10.jpg", "img_2.jpg"));
  EXPECT_TRUE(pack::natural_less("00009.jpg", "00010.jpg"));
  EXPECT_TRUE(pack::natural_less("img_00001.jpg", "x_00001.jpg"));
  EXPECT_TRUE(pack::natural_less("a2", "a02") != pack::natural_less("a02", "a2"));  // a total order
  EXPECT_FALSE(pack::natural_less("a", "a"));
  EXPECT_TRUE(pack::natural_less("a", "a1"));
}

TEST(Clips, RulesParse) {
  ClipRule r;
  ASSERT_TRUE(pack::parse_clip_rule("AUTO", r));
  EXPECT_EQ(r.mode, ClipRule::Mode::auto_);
  ASSERT_TRUE(pack::parse_clip_rule("off", r));
  EXPECT_EQ(r.mode, ClipRule::Mode::off);
  ASSERT_TRUE(pack::parse_clip_rule("videos/*", r));
  EXPECT_EQ(r.mode, ClipRule::Mode::glob);
  EXPECT_EQ(r.glob, "videos/*");
  EXPECT_FALSE(pack::parse_clip_rule("", r));
}

class ClipTree : public ::testing::Test {
 protected:
  void SetUp() override {
    // Clips: numbered frames of one size, as Jester (00001.jpg) and mmaction2 (img_1.jpg,
    // unpadded) name them. Not clips: an ImageNet class (gaps in its numbers), frames of two
    // sizes, too few frames, a folder with a file that is no frame.
    for (int i = 1; i <= 12; ++i) {
      add(fmt::format("jester/100001/{:05d}.jpg", i), 64, 48, i);
      add(fmt::format("kin/cls/v1/img_{}.jpg", i), 80, 48, 100 + i);
    }
    for (int i : {10026, 10027, 10029, 10040, 10042}) add(fmt::format("n01440764/n01440764_{}.JPEG", i), 64, 48, i);
    for (int i = 1; i <= 5; ++i) add(fmt::format("sizes/{}.jpg", i), i == 5 ? 72 : 64, 48, i);
    for (int i = 1; i <= 3; ++i) add(fmt::format("short/{}.jpg", i), 64, 48, i);
    for (int i = 1; i <= 5; ++i) add(fmt::format("mixed/{}.jpg", i), 64, 48, i);
    testutil::write_file(src() / "mixed" / "labels.txt", "x");
  }
  void add(const std::string& rel, int w, int h, uint32_t seed) {
    const std::vector<uint8_t> jpeg = testutil::make_jpeg(w, h, seed);
    testutil::write_file(src() / rel, std::string(jpeg.begin(), jpeg.end()));
  }
  fs::path src() const { return dir_.path() / "src"; }
  std::vector<std::string> clip_folders(const ClipRule& rule) {
    sources::FolderSource source(src());
    std::atomic<bool> cancel{false};
    sources::SourceTree tree = testutil::value_or_throw(source.list(cancel));
    std::vector<std::string> out;
    for (const Clip& c : testutil::value_or_throw(pack::find_clips(tree, source, rule, cancel))) {
      out.push_back(tree.dirs[c.dir].rel);
      for (size_t k = 1; k < c.frames.size(); ++k)
        EXPECT_TRUE(pack::natural_less(tree.files.name(c.frames[k - 1]), tree.files.name(c.frames[k])));
    }
    return out;
  }
  testutil::TempDir dir_;
};

TEST_F(ClipTree, AutoTakesNumberedFramesOfOneSizeOnly) {
  EXPECT_EQ(clip_folders(ClipRule{}), (std::vector<std::string>{"jester/100001", "kin/cls/v1"}));
  EXPECT_TRUE(clip_folders(ClipRule{ClipRule::Mode::off, {}}).empty());
  EXPECT_EQ(clip_folders(ClipRule{ClipRule::Mode::glob, "sizes"}), (std::vector<std::string>{"sizes"}));
  EXPECT_EQ(clip_folders(ClipRule{ClipRule::Mode::glob, "**/v1"}), (std::vector<std::string>{"kin/cls/v1"}));
}

// Without clips the order is the permutation of files; with them, each clip's frames are
// consecutive and in frame order, and every file appears once.
TEST(ClipOrder, ClipsAreUnitsOfThePermutation) {
  const pack::StorageOrder plain = pack::clip_storage_order(50, {}, 7);
  EXPECT_EQ(plain.files, pack::storage_permutation(50, 7));
  std::vector<Clip> clips = {Clip{1, {12, 10, 11, 13}, 0}, Clip{2, {30, 31, 32}, 0}};
  const pack::StorageOrder o = pack::clip_storage_order(50, clips, 7);
  std::vector<uint32_t> sorted = o.files;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> all(50);
  std::iota(all.begin(), all.end(), 0u);
  EXPECT_EQ(sorted, all);
  for (uint32_t c = 0; c < clips.size(); ++c) {
    const auto at = std::find(o.files.begin(), o.files.end(), clips[c].frames[0]) - o.files.begin();
    for (size_t j = 0; j < clips[c].frames.size(); ++j) {
      EXPECT_EQ(o.files[static_cast<size_t>(at) + j], clips[c].frames[j]);
      EXPECT_EQ(o.clip_of[static_cast<size_t>(at) + j], c);
    }
  }
  EXPECT_EQ(std::count(o.clip_of.begin(), o.clip_of.end(), pack::StorageOrder::kNoClip), 50 - 7);
}

// A store of clips: the runs' frames lie by level, so that a run up to level k is one range that
// holds every frame's pieces 0..k; a clip larger than a record goes on in the next record.
class ClipStore : public ClipTree {
 protected:
  void pack_it(uint64_t record_bytes) {
    pack::PackOptions opt = testutil::pack_options(src(), store_dir(), record_bytes);
    opt.layout = index::StoreLayout::file;
    std::atomic<bool> cancel{false};
    report_ = testutil::value_or_throw(pack::pack(opt, nullptr, cancel));
    store_ = testutil::value_or_throw(index::Store::open(store_dir()));
  }
  fs::path store_dir() const { return dir_.path() / "store"; }
  pack::PackReport report_;
  std::unique_ptr<index::Store> store_;
};

TEST_F(ClipStore, ARunUpToALevelIsOneRangeOfItsFrames) {
  pack_it(1 << 20);
  EXPECT_EQ(report_.clips, 2u);
  EXPECT_EQ(report_.clip_frames, 24u);
  const index::Store& st = *store_;
  EXPECT_EQ(st.format_version(), index::kClipsFormatVersion);
  ASSERT_EQ(st.clip_runs().size(), 2u);
  for (const index::ClipRun& c : st.clip_runs()) {
    ASSERT_EQ(c.level_end.size(), static_cast<size_t>(st.levels()) + 1);
    const auto frames = st.record_files(c.record).subspan(c.first_slot, c.frames);
    for (int k = 0; k <= st.levels(); ++k) {
      const uint64_t begin = k == 0 ? c.offset : c.level_end[static_cast<size_t>(k - 1)];
      uint64_t at = begin;
      for (uint32_t id : frames) {
        const index::File& f = st.files()[id];
        EXPECT_EQ(st.clip_of(f), &c);
        const index::Piece& p = st.pieces(f)[static_cast<size_t>(k)];
        EXPECT_EQ(p.offset, at) << "level " << k;
        at += p.size;
      }
      EXPECT_EQ(at, c.level_end[static_cast<size_t>(k)]);
    }
  }
  for (const index::File& f : st.files())
    if (st.relative_path(f).starts_with("n01440764/")) {
      EXPECT_EQ(st.clip_of(f), nullptr);
    }
}

TEST_F(ClipStore, AClipLargerThanARecordGoesOnInTheNextRecord) {
  pack_it(8192);
  const index::Store& st = *store_;
  std::map<uint32_t, std::vector<const index::ClipRun*>> by_dir;
  for (const index::ClipRun& c : st.clip_runs()) by_dir[c.dir].push_back(&c);
  ASSERT_EQ(by_dir.size(), 2u);
  for (const auto& [dir, runs] : by_dir) {
    ASSERT_GT(runs.size(), 1u);
    uint32_t frames = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (i > 0) {
        EXPECT_EQ(runs[i]->record, runs[i - 1]->record + 1);
        EXPECT_EQ(runs[i]->first_slot, 0u);
      }
      frames += runs[i]->frames;
    }
    EXPECT_EQ(frames, 12u);
  }
}

// A crafted clips row whose counts would overflow the loader's sums (frames near 2^63, a first
// slot past the record) is refused in either layout with the loader's message, before any frame
// is laid out; so are negative counts.
TEST_F(ClipStore, ACraftedClipRowIsRefusedInEitherLayout) {
  for (index::StoreLayout layout : {index::StoreLayout::file, index::StoreLayout::scan}) {
    const fs::path store = dir_.path() / fmt::format("crafted-{}", index::layout_name(layout));
    pack::PackOptions opt = testutil::pack_options(src(), store, 1 << 20);
    opt.layout = layout;
    std::atomic<bool> cancel{false};
    ASSERT_TRUE(pack::pack(opt, nullptr, cancel).ok());
    const fs::path index_file = store / "index.sqlite";
    const fs::path pristine = dir_.path() / "pristine.sqlite";
    fs::copy_file(index_file, pristine, fs::copy_options::overwrite_existing);
    for (const char* edit : {"UPDATE clips SET first_slot = first_slot + 1, frames = 9223372036854775807 WHERE id = 0",
                             "UPDATE clips SET frames = 4294967297 WHERE id = 0",
                             "UPDATE clips SET first_slot = 4294967295 WHERE id = 0",
                             "UPDATE clips SET first_slot = -9223372036854775807 WHERE id = 0",
                             "UPDATE clips SET frames = -1 WHERE id = 0"}) {
      fs::copy_file(pristine, index_file, fs::copy_options::overwrite_existing);
      {
        auto db = testutil::value_or_throw(index::SqliteDb::open(index_file.string(), /*writable=*/true));
        ASSERT_TRUE(db->exec(edit).ok()) << edit;
      }
      Result<std::unique_ptr<index::Store>> opened = index::Store::open(store);
      ASSERT_FALSE(opened) << edit << " (" << index::layout_name(layout) << ")";
      EXPECT_EQ(opened.error().code, EINVAL);
      EXPECT_NE(opened.error().message.find("corrupt index: clip 0"), std::string::npos) << opened.error().message;
    }
  }
}

// Reads through the mount's read path (no FUSE): a clip's frames at level k cost one storage read
// of about the clip's level-k bytes, read sparse or by many threads at once.
TEST_F(ClipStore, AClipAtAnyLevelIsOneStorageRead) {
  pack_it(1 << 20);
  const index::Store& st = *store_;
  for (int level : {2, 5, st.levels()}) {
    storage::LocalRecordSource local(st);
    testutil::CountingSource source(local);
    config::Settings settings;
    settings.random_reads = config::RandomReads::pieces;
    core::FileReader reader(st, source, settings, nullptr);
    reader.set_random_reads(false, false);
    for (const index::ClipRun& c : st.clip_runs()) {
      const auto frames = st.record_files(c.record).subspan(c.first_slot, c.frames);
      const uint64_t ranges_before = source.ranges.load(), bytes_before = source.bytes();
      std::vector<std::thread> readers;
      std::vector<std::vector<uint8_t>> got(frames.size());
      for (size_t j = 0; j < frames.size(); j += 3)  // sparse, and at once
        readers.emplace_back([&, j] {
          Result<core::FileReader::Bytes> bytes = reader.read(st.files()[frames[j]], level, false, 0, 1 << 30);
          ASSERT_TRUE(bytes.ok()) << bytes.error().message;
          got[j] = bytes->to_vector();
        });
      for (std::thread& t : readers) t.join();
      EXPECT_EQ(source.ranges.load() - ranges_before, 1u) << "level " << level;
      EXPECT_EQ(source.bytes() - bytes_before, c.level_end[static_cast<size_t>(level)] - c.offset);
      for (size_t j = 0; j < frames.size(); j += 3) {
        const index::File& f = st.files()[frames[j]];
        std::vector<uint8_t> want;
        core::StoredPieces pieces(st, local);
        ASSERT_TRUE(core::read_range(st, f, level, 0, 1 << 30, pieces, want).ok());
        EXPECT_EQ(got[j], want) << st.relative_path(f) << " level " << level;
      }
      EXPECT_EQ(reader.stats().clip_loads.load(), static_cast<uint64_t>(&c - st.clip_runs().data()) + 1);
    }
    EXPECT_EQ(reader.stats().clip_bytes.load(), [&] {
      uint64_t b = 0;
      for (const index::ClipRun& c : st.clip_runs()) b += c.level_end[static_cast<size_t>(level)] - c.offset;
      return b;
    }());
  }
}

}  // namespace
}  // namespace fid
