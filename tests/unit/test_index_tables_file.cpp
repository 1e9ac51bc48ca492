// The tables file: a store opened with a tables folder maps the same tables the index loads,
// and a tables file that is missing, stale or damaged is made again, never served.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/read_range.h"
#include "index/store.h"
#include "index/tables_file.h"
#include "storage/local_record_source.h"
#include "storage/open_store.h"
#include "test_files.h"
#include "test_store_fixture.h"

namespace fsys = std::filesystem;
using fid::index::Store;

namespace {

class TablesFile : public fid::testutil::PackedStore {
 protected:
  fsys::path tables_dir() const { return tables_.path(); }
  fsys::path index_file() const { return path() / "index.sqlite"; }
  fsys::path tables_file() const { return fid::index::tables_file_for(tables_dir(), index_file()); }
  std::unique_ptr<Store> open_mapped() {
    auto s = Store::open(path(), tables_dir());
    EXPECT_TRUE(s.ok()) << s.error().message;
    return std::move(s).value();
  }
  // Every table of `s` equals the loaded store's, and every file reads byte-identical.
  void expect_same_as_loaded(const Store& s) {
    const Store& want = store();
    EXPECT_EQ(s.levels(), want.levels());
    EXPECT_EQ(s.seed(), want.seed());
    EXPECT_EQ(s.format_version(), want.format_version());
    ASSERT_EQ(s.records().size(), want.records().size());
    for (size_t r = 0; r < want.records().size(); ++r) {
      EXPECT_EQ(s.records()[r].path, want.records()[r].path);
      EXPECT_EQ(s.records()[r].size, want.records()[r].size);
      EXPECT_EQ(s.records()[r].layout, want.records()[r].layout);
      EXPECT_EQ(s.records()[r].region_end, want.records()[r].region_end);
      EXPECT_TRUE(std::ranges::equal(s.record_files(static_cast<uint32_t>(r)), want.record_files(static_cast<uint32_t>(r))));
    }
    ASSERT_EQ(s.dirs().size(), want.dirs().size());
    for (const auto& d : want.dirs()) {
      const auto& m = s.dirs()[d.id];
      EXPECT_EQ(s.relative_path(m), want.relative_path(d));
      EXPECT_EQ(m.mtime_ns, d.mtime_ns);
      EXPECT_EQ(m.subdir_count, d.subdir_count);
      EXPECT_EQ(m.file_count, d.file_count);
    }
    EXPECT_TRUE(std::ranges::equal(s.child_dirs(), want.child_dirs()));
    EXPECT_TRUE(std::ranges::equal(s.child_files(), want.child_files()));
    ASSERT_EQ(s.files().size(), want.files().size());
    fid::storage::LocalRecordSource source(s);
    fid::core::StoredPieces stored(s, source);
    for (const auto& f : want.files()) {
      const auto& m = s.files()[f.id];
      EXPECT_EQ(s.relative_path(m), want.relative_path(f));
      EXPECT_EQ(m.kind, f.kind);
      EXPECT_EQ(m.width, f.width);
      EXPECT_EQ(m.source_size, f.source_size);
      EXPECT_EQ(s.storage_position(m), want.storage_position(f));
      ASSERT_EQ(s.pieces(m).size(), want.pieces(f).size());
      for (size_t i = 0; i < want.pieces(f).size(); ++i) {
        EXPECT_EQ(s.pieces(m)[i].offset, want.pieces(f)[i].offset);
        EXPECT_EQ(s.pieces(m)[i].size, want.pieces(f)[i].size);
        EXPECT_EQ(s.pieces(m)[i].checksum, want.pieces(f)[i].checksum);
      }
      std::vector<uint8_t> out;
      ASSERT_TRUE(fid::core::read_range(s, m, s.levels(), 0, UINT64_MAX, stored, out).ok());
      EXPECT_EQ(out, expected(f, s.levels())) << want.relative_path(f);
    }
  }
  fid::testutil::TempDir tables_;
};

TEST_F(TablesFile, FirstOpenMakesTheFileAndLaterOpensMapItUnchanged) {
  ASSERT_FALSE(fsys::exists(tables_file()));
  auto first = open_mapped();
  EXPECT_EQ(first->tables_file(), tables_file());
  EXPECT_EQ(first->tables_problem(), "");
  ASSERT_TRUE(fsys::exists(tables_file()));
  expect_same_as_loaded(*first);
  struct stat made {};
  ASSERT_EQ(::stat(tables_file().c_str(), &made), 0);
  EXPECT_EQ(made.st_mode & 0777, 0600u);
  auto second = open_mapped();
  struct stat again {};
  ASSERT_EQ(::stat(tables_file().c_str(), &again), 0);
  EXPECT_EQ(again.st_ino, made.st_ino) << "a matching tables file is mapped, not made again";
  expect_same_as_loaded(*second);
  // Without a tables folder, the tables stay in memory.
  auto plain = Store::open(path());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain.value()->tables_file().empty());
}

TEST_F(TablesFile, DamagedOrShortFilesAreMadeAgain) {
  open_mapped();
  const auto size = fsys::file_size(tables_file());
  for (uint64_t at : {uint64_t{0}, uint64_t{20}, uint64_t{300}, size / 2, size - 1}) {
    fid::testutil::flip_byte(tables_file(), at, 0x10);
    auto mapped = fid::index::MappedTables::map(tables_file(), fid::index::identify_index(index_file()).value());
    ASSERT_FALSE(mapped.ok()) << "byte " << at;
    EXPECT_NE(mapped.error().message.find(tables_file().string()), std::string::npos) << mapped.error().message;
    auto s = open_mapped();
    EXPECT_EQ(s->tables_file(), tables_file()) << "made again after a flip at " << at;
    expect_same_as_loaded(*s);
  }
  fsys::resize_file(tables_file(), size - 64);
  auto short_map = fid::index::MappedTables::map(tables_file(), fid::index::identify_index(index_file()).value());
  ASSERT_FALSE(short_map.ok());
  EXPECT_EQ(short_map.error().code, EINVAL);
  expect_same_as_loaded(*open_mapped());
  EXPECT_EQ(fsys::file_size(tables_file()), size);
  std::ofstream(tables_file(), std::ios::trunc) << "junk";
  expect_same_as_loaded(*open_mapped());
  auto missing = fid::index::MappedTables::map(tables_dir() / "none.tables", fid::index::identify_index(index_file()).value());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
}

// Rows that point outside the tables, written with matching checksums (as a build whose rows
// meant something else would): refused before any lookup reads through them, and made again.
TEST_F(TablesFile, RowsOutOfBoundsUnderMatchingChecksumsAreRefused) {
  const Store& loaded = store();
  ASSERT_GE(loaded.files().size(), 2u);
  ASSERT_GE(loaded.dirs().size(), 2u);
  const auto identity = fid::index::identify_index(index_file()).value();
  const fid::index::TablesMeta meta{loaded.levels(), loaded.format_version(), loaded.layout(), loaded.seed(),
                                    {loaded.records().begin(), loaded.records().end()},
                                    {loaded.clip_runs().begin(), loaded.clip_runs().end()},
                                    {}};
  struct Damage {
    const char* what;
    std::function<void(std::vector<fid::index::File>&, std::vector<fid::index::Dir>&, std::vector<fid::index::Piece>&,
                       std::vector<uint32_t>&)>
        apply;
    const char* says;
  };
  const std::vector<Damage> damages = {
      {"nothing (the copies are sound)", [](auto&, auto&, auto&, auto&) {}, nullptr},
      {"a file in a record that does not exist", [](auto& f, auto&, auto&, auto&) { f[1].record = 1000000; }, "file row"},
      {"a file's pieces past the piece rows", [](auto& f, auto&, auto& p, auto&) { f[1].first_piece = static_cast<uint32_t>(p.size()); }, "file row"},
      {"a name past the name bytes", [](auto& f, auto&, auto&, auto&) { f[0].name_len = 1u << 30; }, "file row"},
      {"a piece past its record's end", [](auto&, auto&, auto& p, auto&) { p[0].offset = UINT64_MAX - 1; }, "piece outside"},
      {"a folder that is its own parent (a walk up never ends)", [](auto&, auto& d, auto&, auto&) { d[1].parent = 1; }, "folder row"},
      {"a folder's files past the list", [](auto&, auto& d, auto&, auto&) { d[0].file_count = 1u << 30; }, "folder row"},
      {"a listed file that does not exist", [](auto&, auto&, auto&, auto& c) { c[0] = 1000000; }, "file list"},
  };
  for (const Damage& damage : damages) {
    std::vector<fid::index::File> files(loaded.files().begin(), loaded.files().end());
    std::vector<fid::index::Dir> dirs(loaded.dirs().begin(), loaded.dirs().end());
    std::vector<fid::index::Piece> pieces;
    std::string names;  // the copies' own name pool and piece rows
    for (auto& d : dirs) {
      const std::string_view n = loaded.name(d);
      d.name_off = static_cast<uint32_t>(names.size());
      names += n;
    }
    for (auto& f : files) {
      const std::string_view n = loaded.name(f);
      f.name_off = static_cast<uint32_t>(names.size());
      names += n;
      f.first_piece = static_cast<uint32_t>(pieces.size());
      for (const auto& p : loaded.pieces(f)) pieces.push_back(p);
    }
    std::vector<uint32_t> child_files(loaded.child_files().begin(), loaded.child_files().end());
    std::vector<uint32_t> record_begin{0}, record_files;
    for (const auto& r : loaded.records()) {
      for (uint32_t f : loaded.record_files(r.id)) record_files.push_back(f);
      record_begin.push_back(static_cast<uint32_t>(record_files.size()));
    }
    damage.apply(files, dirs, pieces, child_files);
    fid::index::TableSpans t;
    t.child_dirs = loaded.child_dirs();
    t.files = files;
    t.dirs = dirs;
    t.pieces = pieces;
    t.child_files = child_files;
    t.record_begin = record_begin;
    t.record_files = record_files;
    t.names = names;
    ASSERT_TRUE(fid::index::write_tables_file(tables_file(), index_file(), identity, meta, t).ok()) << damage.what;
    auto mapped = fid::index::MappedTables::map(tables_file(), identity);
    if (!damage.says) {
      EXPECT_TRUE(mapped.ok()) << mapped.error().message;
      continue;
    }
    ASSERT_FALSE(mapped.ok()) << damage.what;
    EXPECT_EQ(mapped.error().code, EINVAL) << damage.what;
    EXPECT_NE(mapped.error().message.find(damage.says), std::string::npos) << damage.what << ": " << mapped.error().message;
    auto s = open_mapped();
    EXPECT_EQ(s->tables_file(), tables_file()) << "made again after " << damage.what;
    expect_same_as_loaded(*s);
  }
}

TEST_F(TablesFile, AFileMadeFromAnotherIndexIsStale) {
  open_mapped();
  auto id = fid::index::identify_index(index_file()).value();
  id.mtime_ns += 1;
  auto mapped = fid::index::MappedTables::map(tables_file(), id);
  ASSERT_FALSE(mapped.ok());
  EXPECT_EQ(mapped.error().code, ESTALE);
  // The index replaced by another with the same name (as a new pack renames one into place):
  // the next open makes the file again from the new index.
  const fsys::path copy = path() / "index.copy";
  fsys::copy_file(index_file(), copy);
  fsys::rename(copy, index_file());
  struct stat before {};
  ASSERT_EQ(::stat(tables_file().c_str(), &before), 0);
  auto s = open_mapped();
  struct stat after {};
  ASSERT_EQ(::stat(tables_file().c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  expect_same_as_loaded(*s);
}

TEST_F(TablesFile, AFolderThatCannotBeWrittenLeavesTheTablesInMemory) {
  const fsys::path missing = tables_dir() / "no" / "such";
  auto s = Store::open(path(), missing);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s.value()->tables_file().empty());
  EXPECT_NE(s.value()->tables_problem().find(missing.string()), std::string::npos) << s.value()->tables_problem();
  expect_same_as_loaded(*s.value());
}

TEST_F(TablesFile, WritingPrunesFilesOfGoneIndexesAndDeadWriters) {
  // Another store's tables file, then that store removed.
  fid::testutil::TempDir other;
  fsys::copy(path(), other.path() / "store", fsys::copy_options::recursive);
  auto o = Store::open(other.path() / "store", tables_dir());
  ASSERT_TRUE(o.ok());
  const fsys::path other_file = o.value()->tables_file();
  ASSERT_TRUE(fsys::exists(other_file));
  o.value().reset();
  fsys::remove_all(other.path() / "store");
  // A temporary file of a process that is gone (pid 2^22 + 1 is above the kernel's maximum),
  // and one of this process's, which stays.
  const fsys::path dead = tables_dir() / "0123456789abcdef.tables.tmp-4194305";
  const fsys::path alive = tables_dir() / ("0123456789abcdef.tables.tmp-" + std::to_string(::getpid()));
  std::ofstream(dead) << "x";
  std::ofstream(alive) << "x";
  open_mapped();
  EXPECT_FALSE(fsys::exists(other_file));
  EXPECT_FALSE(fsys::exists(dead));
  EXPECT_TRUE(fsys::exists(alive));
  EXPECT_TRUE(fsys::exists(tables_file()));
}

// What another local user can do to the tables folder (the mount may be root's, with
// allow_other): the folders and the file are private whatever the umask; a folder another user
// could write to, where a forged tables file would be mapped as the store's tables, is refused
// (the tables stay in memory, and tables_problem says why); symbolic links planted under the
// names the writer uses are replaced, never written through.
mode_t mode_of(const fsys::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

std::string contents(const fsys::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(TablesFile, FoldersAre0700AndTheFile0600WhateverTheUmask) {
  const mode_t old = ::umask(0);
  fid::storage::StoreOptions opts;
  opts.index_cache = (tables_dir() / "made" / "cache").string();
  opts.map_tables = true;
  const fsys::path dir = fid::storage::tables_dir(opts);
  auto s = Store::open(path(), dir);
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s.value()->tables_problem(), "");
  EXPECT_EQ(mode_of(tables_dir() / "made"), 0700u);
  EXPECT_EQ(mode_of(tables_dir() / "made" / "cache"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(s.value()->tables_file()), 0600u);
}

TEST_F(TablesFile, AFolderOthersCanWriteToLeavesTheTablesInMemory) {
  open_mapped();  // a good tables file, then the folder opened to everyone: it is not mapped
  ASSERT_EQ(::chmod(tables_dir().c_str(), 0777), 0);
  auto s = Store::open(path(), tables_dir());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s.value()->tables_file().empty());
  EXPECT_EQ(s.value()->tables_problem(), "tables cache " + tables_dir().string() +
                                             ": writable by other users (mode 0777) without the sticky bit; refusing to use it");
  expect_same_as_loaded(*s.value());
  EXPECT_EQ(mode_of(tables_dir()), 0777u);  // left as it is
  ASSERT_EQ(::chmod(tables_dir().c_str(), 0700), 0);
}

TEST_F(TablesFile, AFolderOwnedByAnotherUserLeavesTheTablesInMemory) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a folder to another user needs root";
  ASSERT_EQ(::chown(tables_dir().c_str(), 65534, 65534), 0);
  auto s = Store::open(path(), tables_dir());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s.value()->tables_file().empty());
  EXPECT_EQ(s.value()->tables_problem(), "tables cache " + tables_dir().string() +
                                             ": owned by uid 65534, not by this user (uid 0) or root; refusing to use it");
  EXPECT_TRUE(fsys::is_empty(tables_dir()));
  expect_same_as_loaded(*s.value());
  ASSERT_EQ(::chown(tables_dir().c_str(), 0, 0), 0);
}

TEST_F(TablesFile, SymbolicLinksInTheFolderAreNeverFollowed) {
  fid::testutil::TempDir outside;
  const std::string secret = "not the cache's to touch";
  const fsys::path file = tables_file();
  const std::string name = file.filename().string();
  const fsys::path temp = tables_dir() / (name.substr(0, name.size() - 7) + ".tables.tmp-" + std::to_string(::getpid()));
  const fsys::path other = tables_dir() / "0000000000000000.tables";  // pruning reads every *.tables
  for (const char* t : {"file", "temp", "other"}) std::ofstream(outside.path() / t) << secret;
  fsys::create_symlink(outside.path() / "file", file);
  fsys::create_symlink(outside.path() / "temp", temp);
  fsys::create_symlink(outside.path() / "other", other);
  auto s = open_mapped();
  EXPECT_EQ(s->tables_file(), file);
  EXPECT_FALSE(fsys::is_symlink(file));
  EXPECT_EQ(mode_of(file), 0600u);
  expect_same_as_loaded(*s);
  for (const char* t : {"file", "temp", "other"}) EXPECT_EQ(contents(outside.path() / t), secret) << t;
  // A link in the file's place when a mount maps it: made again, the target untouched.
  s.reset();
  fsys::remove(file);
  fsys::create_symlink(outside.path() / "file", file);
  auto again = fid::index::MappedTables::map(file, fid::index::identify_index(index_file()).value());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, EINVAL);
  expect_same_as_loaded(*open_mapped());
  EXPECT_EQ(contents(outside.path() / "file"), secret);
}

}  // namespace
