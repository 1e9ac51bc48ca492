// The packer's own behaviour: what it refuses, where records close, cancelling, and the temporary
// folder a killed or running pack leaves beside the target.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <string>

#include "pack/packer.h"
#include "test_files.h"
#include "test_pack_tree.h"
#include "test_result.h"

namespace fsys = std::filesystem;
using fid::testutil::TempDir;
using fid::testutil::make_tree;
using fid::testutil::open_error;
using fid::testutil::open_store;
using fid::testutil::pack;
using fid::testutil::pack_options;
using fid::testutil::read_file;
using fid::testutil::try_pack;
using fid::testutil::write_file;

TEST(Pack, RefusesNonEmptyTargetAndLeavesNoTemporaryFolder) {
  TempDir t;
  make_tree(t.path() / "src");
  write_file(t.path() / "store/keep.txt", "user data");
  // A usage error: the option check refuses it, and so does pack itself.
  const fid::Result<fsys::path> checked = fid::pack::check_pack_options(pack_options(t.path() / "src", t.path() / "store"));
  ASSERT_FALSE(checked.ok()) << "accepted a non-empty folder as the store";
  EXPECT_EQ(checked.error().message, (t.path() / "store").string() +
                                         ": already exists and is not an empty folder: pack into a new or empty folder (to "
                                         "replace a store, pack beside it, then swap the folders)");
  const fid::Result<fid::pack::PackReport> packed = try_pack(t.path() / "src", t.path() / "store");
  ASSERT_FALSE(packed.ok()) << "packed over a non-empty folder";
  EXPECT_EQ(packed.error().message, checked.error().message);
  int entries = 0;
  for ([[maybe_unused]] auto& e : fsys::directory_iterator(t.path())) ++entries;
  EXPECT_EQ(entries, 2);  // src and store, nothing else
  EXPECT_TRUE(fsys::exists(t.path() / "store/keep.txt"));
}

// Empty files add no bytes: records close at record_files files instead, and every file reads.
TEST(Pack, RecordsCloseAtRecordFilesWhenFilesAreEmpty) {
  TempDir t;
  for (int i = 0; i < 10; ++i) write_file(t.path() / "src/cls" / (std::to_string(i) + ".bin"), "");
  write_file(t.path() / "src/cls/z.bin", "the one file with bytes");
  auto opt = pack_options(t.path() / "src", t.path() / "store");
  opt.record_files = 3;
  std::atomic<bool> cancel{false};
  auto report = fid::testutil::value_or_throw(fid::pack::pack(opt, nullptr, cancel));
  EXPECT_EQ(report.records, 4u);
  auto s = open_store(t.path() / "store");
  ASSERT_EQ(s->files().size(), 11u);
  for (const auto& r : s->records()) EXPECT_LE(s->record_files(r.id).size(), 3u);
  for (const auto& f : s->files()) {
    int rc = -1;
    EXPECT_EQ(read_file(*s, f, &rc), s->name(f) == "z.bin" ? "the one file with bytes" : "") << s->name(f);
    EXPECT_EQ(rc, 0);
  }
}

TEST(Pack, CancelLeavesNothing) {
  TempDir t;
  make_tree(t.path() / "src");
  fid::pack::PackOptions opt;
  opt.sources = {t.path() / "src"};
  opt.store = t.path() / "store";
  std::atomic<bool> cancel{true};
  const fid::Result<fid::pack::PackReport> packed = fid::pack::pack(opt, nullptr, cancel);
  ASSERT_FALSE(packed.ok());
  EXPECT_EQ(packed.error().code, ECANCELED);
  EXPECT_EQ(packed.error().message, "interrupted");
  EXPECT_FALSE(fsys::exists(t.path() / "store"));
  int entries = 0;
  for ([[maybe_unused]] auto& e : fsys::directory_iterator(t.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

// What a killed pack leaves (records, no index) is removed by the next pack of the same target
// when no pack holds its lock, whatever process now has the PID in its name (1 always runs).
TEST(Pack, ReplacesTheLeftoverOfAKilledPack) {
  TempDir t;
  make_tree(t.path() / "src");
  write_file(t.path() / ".store.tmp-1/records/000000.rec", "half a record");
  write_file(t.path() / ".store.tmp-1/index.sqlite.partial", "half an index");
  write_file(t.path() / ".other.tmp-1/keep", "another target's folder");
  EXPECT_NE(open_error(t.path() / ".store.tmp-1").find("unfinished pack"), std::string::npos);
  fsys::create_directories(t.path() / "store");
  EXPECT_NE(open_error(t.path() / "store").find(".store.tmp-1"), std::string::npos);
  pack(t.path() / "src", t.path() / "store");
  EXPECT_FALSE(fsys::exists(t.path() / ".store.tmp-1"));
  EXPECT_TRUE(fsys::exists(t.path() / ".other.tmp-1/keep"));
  EXPECT_TRUE(fsys::exists(t.path() / "store/index.sqlite"));
  EXPECT_FALSE(fsys::exists(t.path() / "store/index.sqlite.partial"));
  EXPECT_EQ(open_store(t.path() / "store")->files().size(), 42u);
}

// A temporary folder whose lock is held belongs to a pack that runs now: refuse, touch nothing.
TEST(Pack, RefusesWhileAnotherPackOfTheTargetRuns) {
  TempDir t;
  make_tree(t.path() / "src");
  write_file(t.path() / ".store.tmp-999999/records/000000.rec", "being written");
  int fd = ::open((t.path() / ".store.tmp-999999").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  // Not a usage error (the options are fine): a runtime failure of the pack.
  EXPECT_TRUE(fid::pack::check_pack_options(pack_options(t.path() / "src", t.path() / "store")).ok());
  const fid::Result<fid::pack::PackReport> packed = try_pack(t.path() / "src", t.path() / "store");
  ASSERT_FALSE(packed.ok()) << "packed beside a running pack";
  EXPECT_NE(packed.error().message.find("another fidelityfs pack"), std::string::npos) << packed.error().message;
  EXPECT_TRUE(fsys::exists(t.path() / ".store.tmp-999999/records/000000.rec"));
  EXPECT_FALSE(fsys::exists(t.path() / "store"));
  ::close(fd);  // the "running" pack died: its folder is a leftover now
  pack(t.path() / "src", t.path() / "store");
  EXPECT_FALSE(fsys::exists(t.path() / ".store.tmp-999999"));
}
