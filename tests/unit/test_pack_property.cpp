// A property of every store writer: whatever tree pack and append are given (numbered frames in
// the root and in folders, clip rules, videos, same-stem videos, replacements, appends that must
// be refused), every store they write loads, verifies and serves through the mount's core, its
// paths exactly the ones the tree implies; a refused append leaves the store byte for byte as it
// was; no command fails with an internal error. Seeded random trees: FIDELITYFS_PROPERTY_CASES
// sets how many (default 500), FIDELITYFS_PROPERTY_SEED runs one case.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/verify_file.h"
#include "core/filesystem.h"
#include "index/store.h"
#include "pack/append.h"
#include "pack/packer.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_store_fixture.h"
#include "test_videos.h"

namespace fid {
namespace {

namespace fs = std::filesystem;

constexpr int kBlocks = 10;  // the cases run as this many tests, so that the suite's shards share them

size_t case_count() {
  const char* n = std::getenv("FIDELITYFS_PROPERTY_CASES");
  return n ? static_cast<size_t>(std::strtoul(n, nullptr, 10)) : 500;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a store must hold: each file's path, and a blob's bytes ("" for a JPEG, checked by verify).
struct Model {
  std::map<std::string, std::optional<std::string>> files;  // nullopt: a JPEG
  std::set<std::string> dirs;
};

// The videos every case copies from: kVideoFrames[i] frames each.
constexpr int kVideoFrames[] = {2, 3, 5, 8};

class PackProperty : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    pool_ = new testutil::TempDir();
    for (int frames : kVideoFrames) testutil::write_test_video(video(frames), frames, 32, 24);
  }
  static void TearDownTestSuite() {
    delete pool_;
    pool_ = nullptr;
  }
  static fs::path video(int frames) { return pool_->path() / fmt::format("v{}.avi", frames); }

  // One random case: a pack, then up to three appends.
  void run_case(uint64_t seed) {
    SCOPED_TRACE(fmt::format("FIDELITYFS_PROPERTY_SEED={}", seed));
    rng_.seed(seed);
    testutil::TempDir dir;
    Model model;
    pack::PackOptions opt = testutil::pack_options(dir.path() / "src", dir.path() / "store", pick({4096, 8192, 16384, 65536}));
    opt.layout = chance(0.5) ? index::StoreLayout::file : index::StoreLayout::scan;
    opt.seed = rng_();
    const double rule = uniform();
    opt.clips = rule < 0.7 ? pack::ClipRule{} : rule < 0.85 ? pack::ClipRule{pack::ClipRule::Mode::off, {}}
                                                           : pack::ClipRule{pack::ClipRule::Mode::glob, pick_text({"c*", "*", "*/*"})};
    if (chance(0.5)) opt.video_frames = video::FramesOptions{};
    make_tree(dir.path() / "src", "", opt.video_frames.has_value(), model);
    std::atomic<bool> cancel{false};
    Result<pack::PackReport> packed = pack::pack(opt, nullptr, cancel);
    ASSERT_TRUE(packed) << packed.error().message;
    check_store(dir.path() / "store", model);
    const int appends = static_cast<int>(rng_() % 4);
    for (int a = 1; a <= appends && !HasFatalFailure(); ++a) append_once(dir.path(), a, model);
  }

  // Adds a random tree under src/ROOT (ROOT "" is the source's root) to the model.
  void make_tree(const fs::path& src, const std::string& prefix, bool videos_as_frames, Model& model) {
    fs::create_directories(src);
    if (chance(0.3)) add_frames(src, "", prefix, static_cast<int>(4 + rng_() % 3), model);  // a source root of frames
    const int folders = static_cast<int>(1 + rng_() % 4);
    for (int i = 0; i < folders; ++i) {
      const std::string name = fmt::format("{}{}{}", prefix, pick_text({"clip", "cls", "mixed", "empty", "v/clip"}), i);
      if (name.find("clip") != std::string::npos) add_frames(src, name, "img_", static_cast<int>(4 + rng_() % 5), model);
      else if (name.find("empty") != std::string::npos) add_dir(src, name, model);
      else add_images(src, name, static_cast<int>(1 + rng_() % 5), name.find("mixed") != std::string::npos, model);
    }
    for (int i = 0, n = static_cast<int>(rng_() % 3); i < n; ++i)
      add_blob(src, fmt::format("{}note{}.bin", prefix, i), model);
    for (int i = 0, n = static_cast<int>(rng_() % 3); i < n; ++i) {
      const std::string folder = chance(0.5) ? "" : prefix + "movies";
      const std::string stem = fmt::format("{}{}{}", prefix, chance(0.2) ? "dup" : "vid", i);
      add_video(src, folder, stem + ".avi", videos_as_frames, model);
      if (stem.find("dup") != std::string::npos) add_video(src, folder, stem + ".mkv", videos_as_frames, model);
    }
  }

  void append_once(const fs::path& dir, int a, Model& model) {
    std::unique_ptr<index::Store> before_store = testutil::value_or_throw(index::Store::open(dir / "store"));
    const fs::path src = dir / fmt::format("more{}", a);
    pack::PackOptions opt = testutil::pack_options(src, dir / "store");
    ASSERT_TRUE(pack::take_store_options(opt, {}, dir / "store", "store").ok());
    if (chance(0.5)) opt.video_frames = video::FramesOptions{};
    Model next = model;
    make_tree(src, fmt::format("a{}_", a), opt.video_frames.has_value(), next);
    // Files into a plain folder of the store, a replaced blob: both allowed.
    std::set<std::string> whole;  // folders that take no new file: clips' and videos'
    for (const index::ClipRun& c : before_store->clip_runs()) whole.insert(before_store->relative_path(before_store->dirs()[c.dir]));
    for (const index::VideoSource& v : before_store->videos()) whole.insert(before_store->relative_path(before_store->dirs()[v.dir]));
    std::vector<std::string> plain;
    for (const index::Dir& d : before_store->dirs())
      if (d.id != 0 && !whole.count(before_store->relative_path(d))) plain.push_back(before_store->relative_path(d));
    if (!plain.empty() && chance(0.3)) {
      const std::string folder = plain[rng_() % plain.size()];
      if (chance(0.3)) add_frames(src, folder, fmt::format("a{}_", a), 4, next);  // frames among its files
      else add_images(src, folder, 1, false, next, fmt::format("a{}_", a));
    }
    std::vector<std::string> blobs;
    for (const auto& [rel, bytes] : model.files)  // (with videos as frames, a video's name is read as a video)
      if (bytes && !whole.count(fs::path(rel).parent_path().string()) && !(opt.video_frames && sources::is_video_name(rel)))
        blobs.push_back(rel);
    if (!blobs.empty() && chance(0.2)) {
      opt.replace = true;
      add_blob(src, blobs[rng_() % blobs.size()], next);
    }
    // Now and then an append that must be refused: a file into a clip's or a video's folder.
    bool refuse = false;
    if (!whole.empty() && chance(0.15)) {
      std::vector<std::string> folders(whole.begin(), whole.end());
      add_images(src, folders[rng_() % folders.size()], 1, false, next, fmt::format("a{}_", a));
      refuse = true;
    }
    const std::string index_before = file_bytes(dir / "store" / "index.sqlite");
    std::atomic<bool> cancel{false};
    Result<pack::AppendReport> appended = pack::append(opt, pack::PackIo{}, nullptr, cancel);
    if (refuse) {
      ASSERT_FALSE(appended) << "an append into a clip or video folder was taken";
      EXPECT_EQ(appended.error().code, EEXIST) << appended.error().message;
      EXPECT_EQ(file_bytes(dir / "store" / "index.sqlite"), index_before);
      check_store(dir / "store", model);
      return;
    }
    ASSERT_TRUE(appended) << appended.error().message;
    model = std::move(next);
    check_store(dir / "store", model);
  }

  // The store loads, every file verifies, a blob holds its bytes, the paths are the model's, and
  // the mount's core lists and serves every file at its size.
  void check_store(const fs::path& dir, const Model& model) {
    Result<std::unique_ptr<index::Store>> opened = index::Store::open(dir);
    ASSERT_TRUE(opened) << opened.error().message;
    const index::Store& store = **opened;
    storage::LocalRecordSource source(store);
    std::map<std::string, std::optional<std::string>> found;
    std::vector<uint8_t> buf;
    for (const index::File& f : store.files()) {
      const std::string rel = store.relative_path(f);
      EXPECT_EQ(cli::verify_file(store, source, f, buf), "") << rel;
      found[rel] = f.kind == index::FileKind::blob ? std::optional<std::string>(std::string(buf.begin(), buf.end()))
                                                   : std::nullopt;
    }
    EXPECT_EQ(differences(found, model.files), "");
    std::set<std::string> dirs;
    for (const index::Dir& d : store.dirs()) dirs.insert(store.relative_path(d));
    for (const std::string& d : model.dirs) EXPECT_TRUE(dirs.count(d)) << "folder " << d;
    config::Settings settings;
    core::Filesystem mount(store, source, settings, core::Filesystem::Options{"/mnt/property", nullptr, 0, {}, {}});
    std::set<std::string> served;
    walk(mount, 1, "", served);
    mount.detach();
    std::set<std::string> want;
    for (const auto& [rel, bytes] : model.files) want.insert(rel);
    EXPECT_EQ(served, want);
  }

  // The paths in one map and not the other, and those whose bytes differ ("" when none).
  static std::string differences(const std::map<std::string, std::optional<std::string>>& got,
                                 const std::map<std::string, std::optional<std::string>>& want) {
    std::string out;
    for (const auto& [rel, bytes] : got) {
      auto it = want.find(rel);
      if (it == want.end()) out += "\n  in the store only: " + rel;
      else if (it->second != bytes)
        out += fmt::format("\n  other bytes: {} ({} bytes, {} wanted)", rel, bytes ? std::to_string(bytes->size()) : "a JPEG",
                           it->second ? std::to_string(it->second->size()) : "a JPEG");
    }
    for (const auto& [rel, bytes] : want)
      if (!got.count(rel)) out += "\n  missing from the store: " + rel;
    return out;
  }

  void walk(core::Filesystem& mount, uint64_t dir, const std::string& rel, std::set<std::string>& served) {
    for (size_t i = 0;; ++i) {
      Result<std::optional<core::Namespace::DirEntry>> e = mount.entry_at(dir, i);
      ASSERT_TRUE(e) << rel;
      if (!*e) return;
      const std::string name((*e)->name);
      if (name == "." || name == "..") continue;
      const std::string path = rel.empty() ? name : rel + "/" + name;
      Result<core::Namespace::Entry> looked = mount.lookup(dir, name);
      ASSERT_TRUE(looked) << path << ": " << looked.error().message;
      if (S_ISDIR(looked->attr.st_mode)) {
        walk(mount, looked->ino, path, served);
        continue;
      }
      Result<core::FileReader::Bytes> bytes = mount.read(looked->ino, 0, static_cast<uint64_t>(looked->attr.st_size) + 1);
      ASSERT_TRUE(bytes) << path << ": " << bytes.error().message;
      EXPECT_EQ(bytes->to_vector().size(), static_cast<size_t>(looked->attr.st_size)) << path;
      served.insert(path);
    }
  }

  void add_dir(const fs::path& src, const std::string& rel, Model& model) {
    fs::create_directories(src / rel);
    for (fs::path p = rel; !p.empty(); p = p.parent_path()) model.dirs.insert(p.string());
  }
  // `n` frames PREFIX00001.jpg ... of one size in folder `rel`.
  void add_frames(const fs::path& src, const std::string& rel, const std::string& prefix, int n, Model& model) {
    if (!rel.empty()) add_dir(src, rel, model);
    const int w = 24 + 8 * static_cast<int>(rng_() % 4), h = 16 + 8 * static_cast<int>(rng_() % 3);
    for (int k = 1; k <= n; ++k) write_jpeg(src, join(rel, fmt::format("{}{:05d}.jpg", prefix, k)), w, h, model);
  }
  void add_images(const fs::path& src, const std::string& rel, int n, bool with_blob, Model& model,
                  const std::string& prefix = "") {
    add_dir(src, rel, model);
    for (int k = 0; k < n; ++k)
      write_jpeg(src, join(rel, fmt::format("{}n{}_{}.JPEG", prefix, rng_() % 100000, k)),
                 16 + 8 * static_cast<int>(rng_() % 6), 16 + 8 * static_cast<int>(rng_() % 5), model);
    if (with_blob) add_blob(src, join(rel, prefix + "labels.txt"), model);
  }
  void add_blob(const fs::path& src, const std::string& rel, Model& model) {
    const std::string bytes = testutil::random_bytes(rng_() % 3000, static_cast<uint32_t>(rng_()));
    testutil::write_file(src / rel, bytes);
    if (fs::path(rel).has_parent_path()) add_dir(src, fs::path(rel).parent_path().string(), model);
    model.files[rel] = bytes;
  }
  // A video NAME in folder `rel`: with videos as frames, the folder of its frames unless that
  // path is taken (a source path, or an earlier video's frames: "dup.avi" sorts before "dup.mkv").
  void add_video(const fs::path& src, const std::string& rel, const std::string& name, bool as_frames, Model& model) {
    if (!rel.empty()) add_dir(src, rel, model);
    const int frames = kVideoFrames[rng_() % std::size(kVideoFrames)];
    fs::copy_file(video(frames), src / rel / name, fs::copy_options::overwrite_existing);
    const std::string path = join(rel, name);
    if (!as_frames) {
      model.files[path] = file_bytes(src / rel / name);
      return;
    }
    const std::string folder = join(rel, name.substr(0, name.rfind('.')));
    if (model.dirs.count(folder) || model.files.count(folder)) return;  // skipped: its folder is taken
    model.dirs.insert(folder);
    for (int k = 1; k <= frames; ++k) model.files[join(folder, fmt::format("img_{:05d}.jpg", k))] = std::nullopt;
  }
  void write_jpeg(const fs::path& src, const std::string& rel, int w, int h, Model& model) {
    const std::vector<uint8_t> jpeg = testutil::make_jpeg(w, h, static_cast<uint32_t>(rng_()));
    testutil::write_file(src / rel, std::string(jpeg.begin(), jpeg.end()));
    model.files[rel] = std::nullopt;
  }
  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }
  bool chance(double p) { return uniform() < p; }
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  uint64_t pick(std::initializer_list<uint64_t> v) { return v.begin()[rng_() % v.size()]; }
  std::string pick_text(std::initializer_list<const char*> v) { return v.begin()[rng_() % v.size()]; }

  std::mt19937_64 rng_;
  static inline testutil::TempDir* pool_ = nullptr;
};

TEST_P(PackProperty, EveryWrittenStoreLoadsVerifiesAndMounts) {
  if (const char* one = std::getenv("FIDELITYFS_PROPERTY_SEED")) {
    if (GetParam() == 0) run_case(std::strtoull(one, nullptr, 10));
    return;
  }
  const size_t cases = case_count();
  for (size_t i = static_cast<size_t>(GetParam()); i < cases && !HasFailure(); i += kBlocks) run_case(i);
}

INSTANTIATE_TEST_SUITE_P(Cases, PackProperty, ::testing::Range(0, kBlocks));

}  // namespace
}  // namespace fid
