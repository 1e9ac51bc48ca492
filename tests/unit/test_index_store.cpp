// The store round trip (pack -> Store::open -> read_range) and how the loader treats damage.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <map>
#include <random>

#include "index/format.h"
#include "index/order.h"
#include "pack/packer.h"
#include "core/read_range.h"
#include "index/store.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_result.h"
#include "test_store_fixture.h"

namespace fsys = std::filesystem;
using fid::index::FileKind;
using fid::index::Store;
using fid::testutil::PackedStore;

using fid::index::RankDeal;

namespace {

using fid::testutil::TempDir;
using fid::testutil::flip_byte;

void write_file(const fsys::path& p, const std::string& bytes) {
  fsys::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A source tree of blobs in two classes plus an empty folder and a name that is not UTF-8.
std::map<std::string, std::string> make_tree(const fsys::path& src) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 40; ++i) {
    std::string rel = (i % 2 ? "cat/" : "dog/") + std::to_string(i) + ".bin";
    files[rel] = random_bytes(static_cast<size_t>(100 + i * 997), static_cast<uint32_t>(i));
  }
  files["dog/\xff\xfe-latin1.txt"] = "not utf-8 name";
  files["empty.txt"] = "";
  for (auto& [rel, bytes] : files) write_file(src / rel, bytes);
  fsys::create_directories(src / "empty_class");
  return files;
}

fid::pack::PackOptions pack_options(const fsys::path& src, const fsys::path& store, uint64_t record_bytes = 8192) {
  fid::pack::PackOptions opt;
  opt.sources = {src};
  opt.store = store;
  opt.jobs = 2;
  opt.record_bytes = record_bytes;
  // The scan layout: these tests rewrite stores as formats 1 and 2, which had no other.
  opt.layout = fid::index::StoreLayout::scan;
  return opt;
}

fid::Result<fid::pack::PackReport> try_pack(const fsys::path& src, const fsys::path& store) {
  std::atomic<bool> cancel{false};
  return fid::pack::pack(pack_options(src, store), nullptr, cancel);
}

// A pack that must succeed (a failure ends the test).
fid::pack::PackReport pack(const fsys::path& src, const fsys::path& store, uint64_t record_bytes = 8192) {
  std::atomic<bool> cancel{false};
  return fid::testutil::value_or_throw(fid::pack::pack(pack_options(src, store, record_bytes), nullptr, cancel));
}

std::unique_ptr<Store> open_store(const fsys::path& dir) {
  auto s = Store::open(dir);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(s).value() : nullptr;
}

// The error message of opening `dir`, which must fail.
std::string open_error(const fsys::path& dir) {
  auto s = Store::open(dir);
  if (s.ok()) {
    ADD_FAILURE() << "opened " << dir;
    return {};
  }
  return s.error().message;
}

// A file's bytes as the mount reads them (its one piece: these are blobs); *rc: 0 or -errno.
std::string read_file(const Store& s, const fid::index::File& f, int* rc = nullptr) {
  fid::storage::LocalRecordSource source(s);
  fid::core::StoredPieces pieces(s, source);
  std::vector<uint8_t> out;
  fid::Status st = fid::core::read_range(s, f, 1, 0, UINT64_MAX, pieces, out);
  if (rc) *rc = st.ok() ? 0 : -st.error().code;
  return std::string(out.begin(), out.end());
}

void sql(const fsys::path& db, const std::string& statement) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, statement.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(h);
  sqlite3_close(h);
}

std::string hex(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// Rewrites a store as format 1 wrote it: every file's pieces with their absolute offsets (16
// bytes a piece), taken from what the loader derived.
void rewrite_as_format_one(const fsys::path& dir) {
  auto s = Store::open(dir);
  ASSERT_TRUE(s.ok()) << s.error().message;
  std::string statements = "BEGIN;";
  for (const auto& f : (*s)->files()) {
    std::vector<uint8_t> blob;
    for (const auto& p : (*s)->pieces(f)) {
      fid::index::put_le(blob, p.offset, 8);
      fid::index::put_le(blob, p.size, 4);
      fid::index::put_le(blob, p.checksum, 4);
    }
    statements += fmt::format("UPDATE files SET pieces = x'{}' WHERE id = {};", hex(blob), f.id);
  }
  statements += "UPDATE meta SET value = '1' WHERE key = 'format_version'; COMMIT;";
  sql(dir / "index.sqlite", statements);
}

}  // namespace

TEST(Store, RoundTripsEveryFileByteIdentical) {
  TempDir t;
  auto files = make_tree(t.path() / "src");
  auto report = pack(t.path() / "src", t.path() / "store");
  EXPECT_EQ(report.blob, files.size());
  EXPECT_GT(report.records, 3u);

  auto s = open_store(t.path() / "store");
  ASSERT_EQ(s->files().size(), files.size());
  EXPECT_EQ(s->levels(), 10);
  for (const auto& f : s->files()) {
    std::string rel = s->relative_path(f);
    ASSERT_TRUE(files.count(rel)) << rel;
    int rc = -1;
    EXPECT_EQ(read_file(*s, f, &rc), files[rel]) << rel;
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(f.kind, FileKind::blob);
    EXPECT_EQ(s->size_at_level(f, 1), files[rel].size());
    EXPECT_EQ(f.source_size, files[rel].size());
  }
  // Folders: root, cat, dog, empty_class; children sorted bytewise.
  ASSERT_EQ(s->dirs().size(), 4u);
  const auto& root = s->dirs()[0];
  ASSERT_EQ(root.subdir_count, 3u);
  EXPECT_EQ(s->name(s->dirs()[s->child_dirs()[root.subdir_begin]]), "cat");
  EXPECT_EQ(s->name(s->dirs()[s->child_dirs()[root.subdir_begin + 2]]), "empty_class");
  EXPECT_EQ(s->dirs()[s->child_dirs()[root.subdir_begin + 2]].file_count, 0u);
  EXPECT_TRUE(fid::storage::LocalRecordSource(*s).problems().empty());
}

TEST(Store, FlippedByteFailsOnlyThatFile) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store");
  {
    auto s = open_store(t.path() / "store");
    const auto& victim = s->files()[5];
    const auto& p = s->pieces(victim)[0];
    flip_byte(t.path() / "store" / s->records()[victim.record].path, p.offset + p.size / 2);
  }
  auto s = open_store(t.path() / "store");
  int bad = 0;
  for (const auto& f : s->files()) {
    int rc = 0;
    read_file(*s, f, &rc);
    if (rc != 0) {
      EXPECT_EQ(rc, -EIO);
      EXPECT_EQ(f.id, 5u);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 1);
}

TEST(Store, MissingOrTruncatedRecordFailsOnlyItsFiles) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store");
  fsys::remove(t.path() / "store/records/000001.rec");
  fsys::resize_file(t.path() / "store/records/000002.rec", 100);
  auto s = open_store(t.path() / "store");
  const fid::storage::LocalRecordSource source(*s);
  ASSERT_EQ(source.problems().size(), 2u);
  EXPECT_NE(source.problems()[0].find("000001.rec"), std::string::npos);
  EXPECT_NE(source.problems()[1].find("truncated"), std::string::npos);
  for (const auto& f : s->files()) {
    int rc = 0;
    read_file(*s, f, &rc);
    EXPECT_EQ(rc, f.record == 1 || f.record == 2 ? -EIO : 0) << s->relative_path(f);
  }
}

TEST(Store, RefusesWhatIsNotAStoreWithTheFileNamed) {
  TempDir t;
  auto expect_error = [](const fsys::path& p, const std::string& fragment) {
    const std::string e = open_error(p);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  expect_error(t.path() / "nope", "nope");
  expect_error(t.path(), "index.sqlite");
  write_file(t.path() / "index.sqlite", "this is not a database, just text");
  expect_error(t.path(), "index.sqlite");
}

TEST(Store, RefusesNewerFormatAndCorruptRows) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store");
  auto db = t.path() / "store/index.sqlite";
  auto expect_error = [&](const std::string& fragment) {
    const std::string e = open_error(t.path() / "store");
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  sql(db, "UPDATE meta SET value = '99' WHERE key = 'format_version'");
  expect_error("newer");
  sql(db, "UPDATE meta SET value = '2' WHERE key = 'format_version'");
  // Format 2: sizes and checksums; the offsets follow from the slots.
  sql(db, "CREATE TABLE saved AS SELECT * FROM files; CREATE TABLE saved_records AS SELECT * FROM records");
  auto restore = [&] {
    sql(db, "DELETE FROM files; INSERT INTO files SELECT * FROM saved; "
            "DELETE FROM records; INSERT INTO records SELECT * FROM saved_records");
  };
  sql(db, "UPDATE files SET record = 1000 WHERE id = 3");
  expect_error("unknown record");
  restore();
  sql(db, "UPDATE files SET pieces = x'80' WHERE id = 3");
  expect_error("malformed pieces blob");
  restore();
  sql(db, "UPDATE files SET pieces = pieces || x'00' WHERE id = 3");
  expect_error("bytes after its 1 pieces");
  restore();
  sql(db, "UPDATE files SET pieces = x'0100000000' WHERE id = 3");  // 1 byte: the region is not filled
  expect_error("its pieces end at");
  restore();
  sql(db, "UPDATE files SET pieces = x'ffffffff0f00000000' WHERE id = 3");  // 4 GiB - 1
  expect_error("lies outside record");
  restore();
  sql(db, "UPDATE files SET slot = slot + 1 WHERE id = 3");
  expect_error("slots are not");
  restore();
  // A huge id is refused without sizing the tables by it (fuzz_index found a 5 GB reserve).
  sql(db, "UPDATE files SET id = 4000000000 WHERE id = (SELECT max(id) FROM files)");
  expect_error("file ids are not 0..n-1");
  restore();
  sql(db, "UPDATE records SET region_ends = x'0100000000000000' WHERE id = 0");
  expect_error("ends before it starts");
  restore();
  sql(db, "UPDATE records SET size = size + 1 WHERE id = 0");
  expect_error("its size is");
  restore();
  sql(db, "DROP TABLE saved; DROP TABLE saved_records");
  open_store(t.path() / "store");
  // Format 1: absolute offsets, 16 bytes a piece.
  rewrite_as_format_one(t.path() / "store");
  open_store(t.path() / "store");
  sql(db, "UPDATE files SET pieces = x'00' WHERE id = 3");
  expect_error("piece bytes");
  sql(db, "UPDATE files SET pieces = zeroblob(16) WHERE id = 3");
  expect_error("outside record");
}

// A store packed in format 1 (absolute offsets stored) still mounts, with the same pieces; the
// offsets format 2 derives point at bytes whose checksums the packer computed.
TEST_F(PackedStore, LoadsFormatOneAndDerivesTheOffsetsFormatOneStored) {
  std::vector<fid::index::Piece> derived;
  for (const auto& f : store().files())
    for (const auto& p : store().pieces(f)) {
      derived.push_back(p);
      EXPECT_EQ(fid::index::piece_checksum(raw_piece(f, static_cast<uint32_t>(&p - store().pieces(f).data()))),
                p.checksum) << store().relative_path(f);
    }
  bool scan = false, whole = false;
  for (const auto& r : store().records()) (r.layout == fid::index::RecordLayout::scan ? scan : whole) = true;
  EXPECT_TRUE(scan && whole);
  EXPECT_EQ(store().format_version(), fid::index::kScanLayoutFormatVersion);
  rewrite_as_format_one(path());
  reopen();
  EXPECT_EQ(store().format_version(), 1);
  size_t i = 0;
  for (const auto& f : store().files())
    for (const auto& p : store().pieces(f)) {
      ASSERT_LT(i, derived.size());
      EXPECT_EQ(p.offset, derived[i].offset);
      EXPECT_EQ(p.size, derived[i].size);
      EXPECT_EQ(p.checksum, derived[i].checksum);
      ++i;
    }
  EXPECT_EQ(i, derived.size());
  for (const auto& f : store().files()) {
    fid::storage::LocalRecordSource source(store());
    fid::core::StoredPieces pieces(store(), source);
    std::vector<uint8_t> out;
    ASSERT_TRUE(fid::core::read_range(store(), f, store().levels(), 0, UINT64_MAX, pieces, out).ok());
    EXPECT_EQ(out, expected(f, store().levels())) << store().relative_path(f);
  }
}

// A store's names become paths in the mount: a name that cannot be one path component, two
// entries of one name in a folder, or '.fidelity' in the root is refused, naming the row; an
// index whose tables are views (a recursive view never ends) or has triggers is refused, and
// quickly.
TEST(Store, RefusesNamesThatAreNotPathComponentsAndSchemaThatRuns) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store");
  const fsys::path db = t.path() / "store/index.sqlite";
  sql(db, "CREATE TABLE saved AS SELECT * FROM files; CREATE TABLE saved_dirs AS SELECT * FROM dirs");
  auto restore = [&] {
    sql(db, "DELETE FROM files; INSERT INTO files SELECT * FROM saved; DELETE FROM dirs; INSERT INTO dirs SELECT * FROM saved_dirs");
  };
  auto expect_error = [&](const std::string& fragment) {
    const std::string e = open_error(t.path() / "store");
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  sql(db, "UPDATE files SET name = CAST('a/b' AS BLOB) WHERE id = 3");
  expect_error("file 3 has a name holding '/': 'a/b'");
  restore();
  sql(db, "UPDATE files SET name = CAST('..' AS BLOB) WHERE id = 3");
  expect_error("file 3 has a name the kernel reserves: '..'");
  restore();
  sql(db, "UPDATE files SET name = x'' WHERE id = 3");
  expect_error("file 3 has an empty name");
  restore();
  sql(db, "UPDATE files SET name = x'610062' WHERE id = 3");
  expect_error("file 3 has a name holding a NUL byte: 'a\\x00b'");
  restore();
  sql(db, "UPDATE files SET name = CAST(replace(hex(zeroblob(256)), '00', 'a') AS BLOB) WHERE id = 3");
  expect_error("file 3 has a name over 255 bytes");
  restore();
  sql(db, "UPDATE dirs SET name = CAST('.' AS BLOB) WHERE id = 1");
  expect_error("directory 1 has a name the kernel reserves: '.'");
  restore();
  // Two files of one folder with one name; a folder and a file of one name.
  sql(db, "UPDATE files SET name = (SELECT f.name FROM files f WHERE f.dir = files.dir AND f.id <> files.id "
          "ORDER BY f.id LIMIT 1) WHERE id = (SELECT min(id) FROM files WHERE dir = 1)");
  expect_error("holds two entries named");
  restore();
  sql(db, "UPDATE files SET dir = 0, name = (SELECT name FROM dirs WHERE id = 1) WHERE id = 3");
  expect_error("directory 0 ('') holds two entries named");
  restore();
  sql(db, "UPDATE files SET dir = 0, name = CAST('.fidelity' AS BLOB) WHERE id = 3");
  expect_error("the root holds '.fidelity'");
  restore();
  ASSERT_NE(open_store(t.path() / "store"), nullptr);
  // A view in the place of a table is never evaluated: a plain one, and one over a recursive
  // query that never ends.
  sql(db, "ALTER TABLE records RENAME TO real_records; CREATE VIEW records AS SELECT * FROM real_records");
  expect_error("view");
  sql(db, "DROP VIEW records; CREATE VIEW records AS WITH RECURSIVE c(x) AS "
          "(SELECT 0 UNION ALL SELECT x + 1 FROM c) SELECT x AS id, 'records/000000.rec' AS path, 1 AS layout, "
          "0 AS size, x'' AS region_ends, x AS header_id FROM c");
  const auto t0 = std::chrono::steady_clock::now();
  expect_error("bad index schema");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  sql(db, "DROP VIEW records; ALTER TABLE real_records RENAME TO records");
  ASSERT_NE(open_store(t.path() / "store"), nullptr);
  // A column computed on read (a generated column) that would allocate 900 MB for each row is
  // cut by SQLite's value limit before it is made.
  sql(db, "ALTER TABLE dirs RENAME TO stored_dirs; CREATE TABLE dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, "
          "stored BLOB, mtime_ns INTEGER NOT NULL, name BLOB GENERATED ALWAYS AS (zeroblob(900000000)) VIRTUAL); "
          "INSERT INTO dirs(id, parent, stored, mtime_ns) SELECT id, parent, name, mtime_ns FROM stored_dirs");
  expect_error("string or blob too big");
}

// The file layout holds the same records as the scan layout (same files, slots and sizes; each
// JPEG's pieces back to back instead of level by level), is format 4 and says so in its meta, and
// a loader refuses an index whose records and meta disagree about the layout.
class FileLayoutStore : public PackedStore {
 protected:
  fid::index::StoreLayout layout() const override { return fid::index::StoreLayout::file; }
};

TEST_F(FileLayoutStore, HoldsTheScanLayoutsRecordsWithEachFilesPiecesBackToBack) {
  EXPECT_EQ(store().layout(), fid::index::StoreLayout::file);
  EXPECT_EQ(store().format_version(), 4);
  auto opt = pack_options(path().parent_path() / "src", path().parent_path() / "scan", 16 * 1024);
  std::atomic<bool> cancel{false};
  ASSERT_TRUE(fid::pack::pack(opt, nullptr, cancel).ok());
  const std::unique_ptr<Store> scan = open_store(path().parent_path() / "scan");
  EXPECT_EQ(scan->layout(), fid::index::StoreLayout::scan);
  ASSERT_EQ(scan->records().size(), store().records().size());
  bool file_records = false;
  for (size_t r = 0; r < scan->records().size(); ++r) {
    const auto &a = scan->records()[r], &b = store().records()[r];
    EXPECT_EQ(a.size, b.size);
    EXPECT_EQ(b.region_end.size(), 1u);
    EXPECT_EQ(a.layout == fid::index::RecordLayout::scan, b.layout == fid::index::RecordLayout::file);
    file_records |= b.layout == fid::index::RecordLayout::file;
  }
  EXPECT_TRUE(file_records);
  ASSERT_EQ(scan->files().size(), store().files().size());
  for (const auto& f : store().files()) {
    const auto& g = scan->files()[f.id];
    EXPECT_EQ(f.record, g.record);
    EXPECT_EQ(f.slot, g.slot);
    const auto pf = store().pieces(f), pg = scan->pieces(g);
    ASSERT_EQ(pf.size(), pg.size());
    for (size_t i = 0; i < pf.size(); ++i) {
      EXPECT_EQ(pf[i].checksum, pg[i].checksum);
      if (i > 0) {
        EXPECT_EQ(pf[i].offset, pf[i - 1].offset + pf[i - 1].size) << "pieces back to back";
      }
      EXPECT_EQ(fid::index::piece_checksum(raw_piece(f, static_cast<uint32_t>(i))), pf[i].checksum);
    }
  }
}

TEST_F(FileLayoutStore, LoaderRefusesALayoutItsRecordsDoNotHave) {
  const fsys::path db = path() / "index.sqlite";
  sql(db, "UPDATE meta SET value = 'scan' WHERE key = 'layout'");
  EXPECT_NE(open_error(path()).find("which a scan-layout store does not have"), std::string::npos) << open_error(path());
  sql(db, "UPDATE meta SET value = 'zip' WHERE key = 'layout'");
  EXPECT_NE(open_error(path()).find("meta 'layout' is 'zip'"), std::string::npos) << open_error(path());
  sql(db, "UPDATE meta SET value = 'file' WHERE key = 'layout'; UPDATE meta SET value = '3' WHERE key = 'format_version'");
  EXPECT_NE(open_error(path()).find("a file-layout store of format version 3"), std::string::npos) << open_error(path());
  sql(db, "UPDATE meta SET value = '4' WHERE key = 'format_version'; UPDATE records SET layout = 0 WHERE layout = 2");
  EXPECT_NE(open_error(path()).find("which a file-layout store does not have"), std::string::npos) << open_error(path());
  sql(db, "UPDATE records SET layout = 3 WHERE layout = 0");
  EXPECT_NE(open_error(path()).find("has layout 3"), std::string::npos) << open_error(path());
}

TEST_F(FileLayoutStore, TheTablesFileKeepsTheLayout) {
  TempDir tables;
  for (int open = 0; open < 2; ++open) {  // made from the index, then mapped
    auto s = fid::testutil::value_or_throw(Store::open(path(), tables.path()));
    EXPECT_FALSE(s->tables_file().empty()) << s->tables_problem();
    EXPECT_EQ(s->layout(), fid::index::StoreLayout::file);
    for (const auto& f : s->files())
      for (uint32_t i = 0; i < f.piece_count; ++i)
        EXPECT_EQ(s->pieces(f)[i].offset, store().pieces(store().files()[f.id])[i].offset);
  }
}

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

// ---------------------------------------------------------------------------------------------
// Published orders


namespace {

std::unique_ptr<Store> order_store(TempDir& t) {
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 4096);
  return open_store(t.path() / "store");
}

}  // namespace

TEST(EpochOrder, IsAPermutationDeterministicAndChangesWithEpochAndSeed) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p;
  auto a = fid::index::epoch_order(*s, p);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted.size(), s->files().size());
  for (uint32_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(a, fid::index::epoch_order(*s, p));
  p.epoch = 1;
  EXPECT_NE(a, fid::index::epoch_order(*s, p));
  p.epoch = 0;
  p.seed = 7;
  EXPECT_NE(a, fid::index::epoch_order(*s, p));
}

// World 1 is the order it was before ranks were dealt whole records (users rely on it): file ids
// of order_store's store computed with that implementation.
TEST(EpochOrder, WorldOneIsUnchanged) {
  TempDir t;
  auto s = order_store(t);
  ASSERT_EQ(s->files().size(), 42u);
  ASSERT_EQ(s->records().size(), 36u);
  fid::index::OrderParams p;
  p.epoch = 3;
  EXPECT_EQ(fid::index::epoch_order(*s, p),
            (std::vector<uint32_t>{36, 4,  10, 5,  6,  1,  29, 41, 34, 9,  38, 16, 22, 27, 0,  2,  23, 13, 21, 18, 31,
                                   3,  32, 7,  39, 20, 30, 17, 33, 11, 14, 26, 37, 25, 12, 35, 28, 40, 8,  19, 15, 24}));
  p.rank = 0;
  p.world = 1;
  p.seed = 7;
  p.window = 2;
  const std::vector<uint32_t> seeded{4,  3,  30, 20, 23, 14, 10, 35, 36, 29, 28, 39, 40, 13, 33, 27, 19, 16, 12, 17, 9,
                                     37, 38, 18, 31, 25, 26, 11, 2,  21, 0,  6,  32, 7,  5,  34, 15, 8,  24, 22, 1,  41};
  EXPECT_EQ(fid::index::epoch_order(*s, p), seeded);
  EXPECT_EQ(fid::index::epoch_rank_orders(*s, p), std::vector<std::vector<uint32_t>>{seeded});
}

namespace {

// Checks the rank orders of `world` against the rules of docs/FORMAT.md: each non-empty record
// in exactly one rank, ranks disjoint and together complete before padding, equal lengths,
// padding = the rank's own order's tail repeated, and epoch_rank_orders agreeing.
void check_rank_split(const Store& s, fid::index::OrderParams p) {
  const auto files = s.files();
  const auto unpadded = fid::index::epoch_rank_orders(s, p);
  std::vector<int> owner(s.records().size(), -1);
  std::vector<uint32_t> seen;
  size_t longest = 0;
  for (uint32_t r = 0; r < p.world; ++r) {
    p.rank = r;
    const auto order = fid::index::epoch_order(s, p);
    EXPECT_EQ(order, fid::index::epoch_order(s, p)) << "deterministic";
    if (r == 0) longest = order.size();
    EXPECT_EQ(order.size(), longest) << "rank " << r << " of " << p.world << ": equal lengths";
    if (r >= unpadded.size()) {  // no records of its own: another rank's order, padded
      EXPECT_EQ(order, fid::index::epoch_order(s, {p.seed, p.epoch, static_cast<uint32_t>(r % unpadded.size()),
                                                   p.world, p.window, p.ranks}));
      continue;
    }
    const auto& own = unpadded[r];
    ASSERT_FALSE(own.empty());
    ASSERT_LE(own.size(), order.size());
    EXPECT_TRUE(std::equal(own.begin(), own.end(), order.begin())) << "rank " << r << ": own order first";
    // Padding: the own order's last entries, repeated end to end, ending with its last entry.
    const size_t n = own.size(), len = order.size();
    for (size_t j = n; j < len; ++j) EXPECT_EQ(order[j], own[(j + n * len - len) % n]) << "rank " << r << " pad " << j;
    for (uint32_t id : own) {
      const uint32_t rec = files[id].record;
      EXPECT_TRUE(owner[rec] == -1 || owner[rec] == static_cast<int>(r)) << "record " << rec << " in two ranks";
      owner[rec] = static_cast<int>(r);
    }
    for (size_t j = n; j < len; ++j) {
      EXPECT_EQ(owner[files[order[j]].record], static_cast<int>(r)) << "padding reads only records of the rank";
    }
    seen.insert(seen.end(), own.begin(), own.end());
  }
  // Disjoint and complete before padding.
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), files.size());
  for (uint32_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
  // Every record with files belongs to exactly one rank (set above), and the deal kept the ranks
  // within one record of each other: the padding is shorter than the largest record.
  std::vector<size_t> per_record(s.records().size(), 0);
  for (const auto& f : files) per_record[f.record]++;
  const size_t biggest = *std::max_element(per_record.begin(), per_record.end());
  for (size_t rec = 0; rec < per_record.size(); ++rec) EXPECT_EQ(per_record[rec] > 0, owner[rec] >= 0) << rec;
  for (const auto& own : unpadded) EXPECT_LE(longest - own.size(), biggest);
}

// The reference deal of docs/FORMAT.md: record file counts in the order the records reach the
// deal; returns each rank's file count.
std::vector<size_t> reference_deal_counts(const std::vector<size_t>& record_files, uint32_t world) {
  std::vector<size_t> load(world, 0);
  for (size_t n : record_files) {
    if (n == 0) continue;
    size_t best = 0;
    for (size_t r = 1; r < world; ++r)
      if (load[r] < load[best]) best = r;
    load[best] += n;
  }
  return load;
}

}  // namespace

TEST(EpochOrder, RanksGetWholeRecordsDisjointCompleteAndEqualLengths) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p;
  p.epoch = 3;
  for (RankDeal deal : {RankDeal::stable, RankDeal::per_epoch}) {
    p.ranks = deal;
    for (uint32_t world : {2u, 3u, 7u, 36u, 50u}) {  // 50: more ranks than records
      p.world = world;
      SCOPED_TRACE(testing::Message() << "world " << world << " per-epoch " << (deal == RankDeal::per_epoch));
      check_rank_split(*s, p);
    }
  }
}

TEST(EpochOrder, RanksOfBigRecordsArePaddedWithTheirOwnFiles) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);  // several files per record
  auto s = open_store(t.path() / "store");
  std::vector<size_t> per_record(s->records().size(), 0);
  for (const auto& f : s->files()) per_record[f.record]++;
  ASSERT_GT(*std::max_element(per_record.begin(), per_record.end()), 2u);
  bool padded = false;
  for (uint32_t window : {1u, 4u}) {
    for (uint64_t epoch : {0u, 1u, 2u}) {
      for (uint32_t world : {2u, 3u, 4u}) {
        for (RankDeal deal : {RankDeal::stable, RankDeal::per_epoch}) {
        fid::index::OrderParams p{5, epoch, 0, world, window, deal};
        SCOPED_TRACE(testing::Message() << "epoch " << epoch << " world " << world << " window " << window);
        check_rank_split(*s, p);
        const auto unpadded = fid::index::epoch_rank_orders(*s, p);
        for (size_t r = 0; r < unpadded.size(); ++r) padded |= unpadded[r].size() != unpadded[0].size();
        }
      }
    }
  }
  EXPECT_TRUE(padded) << "no case needed padding: the fixture tests nothing";
}

TEST(EpochOrder, PerEpochDealGoesToTheRankWithFewestFilesAndRanksDrawIndependently) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);
  auto s = open_store(t.path() / "store");
  const auto files = s->files();
  fid::index::OrderParams p{11, 4, 0, 3, 4, RankDeal::per_epoch};
  const auto orders = fid::index::epoch_rank_orders(*s, p);
  ASSERT_EQ(orders.size(), 3u);
  // The records in the order they reached the deal: the world-1 order's records by first use
  // are the shuffled list (window 1 takes them one at a time).
  fid::index::OrderParams one = p;
  one.world = 1;
  one.window = 1;
  one.ranks = RankDeal::stable;  // world 1 is the same under both deals
  std::vector<size_t> record_files;
  std::vector<int> used(s->records().size(), 0);
  for (const auto& f : files) used[f.record]++;
  std::vector<bool> first(s->records().size(), true);
  for (uint32_t id : fid::index::epoch_order(*s, one)) {
    const uint32_t rec = files[id].record;
    if (first[rec]) record_files.push_back(static_cast<size_t>(used[rec]));
    first[rec] = false;
  }
  const auto load = reference_deal_counts(record_files, 3);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(orders[r].size(), load[r]) << r;
  // A rank's order depends on its own records and generator only: the same for world 3 as
  // computed alone (epoch_order of that rank, before its padding).
  for (uint32_t r = 0; r < 3; ++r) {
    p.rank = r;
    auto alone = fid::index::epoch_order(*s, p);
    alone.resize(orders[r].size());
    EXPECT_EQ(alone, orders[r]);
  }
  // Seed and epoch change the split.
  fid::index::OrderParams other = p;
  other.epoch = 5;
  EXPECT_NE(fid::index::epoch_rank_orders(*s, other), orders);
}

namespace {

// SplitMix64 and Fisher-Yates as docs/FORMAT.md writes them, apart from the implementation.
struct RefRng {
  uint64_t state;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t next() { return mix(state += 0x9E3779B97F4A7C15ull); }
  uint32_t below(uint32_t n) {
    __extension__ typedef unsigned __int128 u128;
    return static_cast<uint32_t>((static_cast<u128>(next()) * n) >> 64);
  }
};

}  // namespace

// order_ranks=stable: a rank's records depend on the store, the seed and the world size only;
// each epoch reorders them. The deal follows docs/FORMAT.md step 3.1 (the seed's own shuffle).
TEST(EpochOrder, StableDealKeepsEachRanksRecordsForEveryEpoch) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);
  auto s = open_store(t.path() / "store");
  const auto files = s->files();
  std::vector<size_t> per_record(s->records().size(), 0);
  for (const auto& f : files) per_record[f.record]++;
  for (uint32_t world : {2u, 3u, 5u}) {
    SCOPED_TRACE(world);
    fid::index::OrderParams p{11, 0, 0, world, 4, RankDeal::stable};
    const auto dealt = fid::index::rank_records(*s, p);
    std::vector<std::set<uint32_t>> own_records;
    std::vector<std::vector<uint32_t>> first_orders;
    for (uint64_t epoch : {0u, 1u, 7u}) {
      p.epoch = epoch;
      EXPECT_EQ(fid::index::rank_records(*s, p).size(), dealt.size());
      const auto orders = fid::index::epoch_rank_orders(*s, p);
      ASSERT_EQ(orders.size(), dealt.size());
      for (size_t r = 0; r < orders.size(); ++r) {
        std::set<uint32_t> recs;
        for (uint32_t id : orders[r]) recs.insert(files[id].record);
        EXPECT_EQ(recs, std::set<uint32_t>(dealt[r].begin(), dealt[r].end())) << "rank " << r << " epoch " << epoch;
        if (epoch == 0) {
          own_records.push_back(recs);
          first_orders.push_back(orders[r]);
        } else if (orders[r].size() > 2) {
          EXPECT_NE(orders[r], first_orders[r]) << "rank " << r << ": the same order in epochs 0 and " << epoch;
        }
      }
    }
    // The reference deal: record ids shuffled with SplitMix64(seed ^ 0x9FB21C651E98DF25), dealt
    // to the rank with the fewest files (ties: the lowest).
    RefRng d{11 ^ 0x9FB21C651E98DF25ull};
    std::vector<uint32_t> recs(s->records().size());
    for (uint32_t i = 0; i < recs.size(); ++i) recs[i] = i;
    for (auto i = static_cast<uint32_t>(recs.size()); i > 1; --i) std::swap(recs[i - 1], recs[d.below(i)]);
    std::vector<size_t> load(world, 0);
    std::vector<std::set<uint32_t>> expect(world);
    for (uint32_t r : recs) {
      if (per_record[r] == 0) continue;
      size_t best = 0;
      for (size_t k = 1; k < world; ++k)
        if (load[k] < load[best]) best = k;
      load[best] += per_record[r];
      expect[best].insert(r);
    }
    for (size_t r = 0; r < dealt.size(); ++r) EXPECT_EQ(own_records[r], expect[r]) << "rank " << r;
  }
  // Only the seed changes the deal.
  fid::index::OrderParams a{11, 0, 0, 3, 4, RankDeal::stable}, b{12, 0, 0, 3, 4, RankDeal::stable};
  EXPECT_NE(fid::index::rank_records(*s, a), fid::index::rank_records(*s, b));
  // Per-epoch dealing changes the records with the epoch.
  fid::index::OrderParams e0{11, 0, 0, 3, 4, RankDeal::per_epoch}, e1{11, 1, 0, 3, 4, RankDeal::per_epoch};
  EXPECT_NE(fid::index::rank_records(*s, e0), fid::index::rank_records(*s, e1));
}

namespace {

// Every rank's own order under the stable deal, written from docs/FORMAT.md steps 1 and 3
// (not from the implementation): the seed's shuffle of the records dealt to the ranks, then per
// rank its records shuffled and drawn with G_r.
std::vector<std::vector<uint32_t>> reference_stable_orders(const Store& s, uint64_t seed, uint64_t epoch,
                                                            uint32_t world, uint32_t window) {
  const auto files = s.files();
  std::vector<std::vector<uint32_t>> members(s.records().size());
  for (const auto& f : files) members[f.record].push_back(f.id);
  for (auto& m : members) std::sort(m.begin(), m.end(), [&](uint32_t x, uint32_t y) { return files[x].slot < files[y].slot; });
  auto shuffle = [](std::vector<uint32_t>& v, RefRng& g) {
    for (auto i = static_cast<uint32_t>(v.size()); i > 1; --i) std::swap(v[i - 1], v[g.below(i)]);
  };
  RefRng d{seed ^ 0x9FB21C651E98DF25ull};
  std::vector<uint32_t> recs(s.records().size());
  for (uint32_t i = 0; i < recs.size(); ++i) recs[i] = i;
  shuffle(recs, d);
  std::vector<std::vector<uint32_t>> dealt;
  std::vector<size_t> load;
  for (uint32_t r : recs) {
    if (members[r].empty()) continue;
    if (dealt.size() < world) {
      dealt.push_back({r});
      load.push_back(members[r].size());
      continue;
    }
    size_t best = 0;
    for (size_t k = 1; k < world; ++k)
      if (load[k] < load[best]) best = k;
    dealt[best].push_back(r);
    load[best] += members[r].size();
  }
  const uint64_t s0 = seed ^ (0xD1B54A32D192ED03ull * (epoch + 1));
  std::vector<std::vector<uint32_t>> orders;
  for (uint32_t r = 0; r < dealt.size(); ++r) {
    RefRng g{RefRng::mix(s0 + (r + 1) * 0x9E3779B97F4A7C15ull)};
    std::vector<uint32_t> list = dealt[r];
    shuffle(list, g);
    std::vector<uint32_t> pool, order;
    size_t next = 0;
    uint32_t active = 0;
    std::vector<uint32_t> left(members.size(), 0);
    auto admit = [&] {
      while (active < window && next < list.size()) {
        const uint32_t rec = list[next++];
        pool.insert(pool.end(), members[rec].begin(), members[rec].end());
        left[rec] = static_cast<uint32_t>(members[rec].size());
        ++active;
      }
    };
    admit();
    while (!pool.empty()) {
      const uint32_t i = g.below(static_cast<uint32_t>(pool.size()));
      const uint32_t id = pool[i];
      pool[i] = pool.back();
      pool.pop_back();
      order.push_back(id);
      if (--left[files[id].record] == 0) {
        --active;
        admit();
      }
    }
    orders.push_back(order);
  }
  return orders;
}

}  // namespace

TEST(EpochOrder, StableRankOrdersFollowTheFormat) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store", 24 << 10);  // several files per record
  auto s = open_store(t.path() / "store");
  for (uint32_t world : {2u, 3u, 4u}) {
    for (uint64_t epoch : {0u, 3u}) {
      for (uint32_t window : {1u, 2u}) {
        fid::index::OrderParams p{7, epoch, 0, world, window, RankDeal::stable};
        SCOPED_TRACE(testing::Message() << "world " << world << " epoch " << epoch << " window " << window);
        EXPECT_EQ(fid::index::epoch_rank_orders(*s, p), reference_stable_orders(*s, 7, epoch, world, window));
      }
    }
  }
}

// A golden value of the stable deal (order_store's store, seed 7, epoch 3, rank 1 of 4, window
// 2), so that any change of the algorithm shows here and in docs/FORMAT.md.
TEST(EpochOrder, StableRankOrderGolden) {
  TempDir t;
  auto s = order_store(t);
  fid::index::OrderParams p{7, 3, 1, 4, 2, RankDeal::stable};
  EXPECT_EQ(fid::index::epoch_order(*s, p), (std::vector<uint32_t>{41, 1, 32, 35, 7, 27, 11, 39, 25, 9, 9}));
}

TEST(EpochOrder, NeverHasMoreThanWindowRecordsOpen) {
  TempDir t;
  auto s = order_store(t);
  ASSERT_GT(s->records().size(), 5u);
  for (uint32_t window : {1u, 2u, 4u}) {
    fid::index::OrderParams p;
    p.window = window;
    auto order = fid::index::epoch_order(*s, p);
    std::vector<uint32_t> left(s->records().size(), 0);
    for (const auto& f : s->files()) left[f.record]++;
    std::vector<bool> opened(left.size(), false);
    uint32_t open = 0;
    for (uint32_t id : order) {
      uint32_t r = s->files()[id].record;
      if (!opened[r]) {
        opened[r] = true;
        ++open;
      }
      EXPECT_LE(open, window);
      if (--left[r] == 0) --open;
    }
  }
}

