// The store round trip (pack -> Store::open -> read_range) and how the loader treats damage.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <map>

#include "index/format.h"
#include "pack/packer.h"
#include "core/read_range.h"
#include "index/store.h"
#include "storage/local_record_source.h"
#include "test_files.h"
#include "test_result.h"
#include "test_pack_tree.h"
#include "test_store_fixture.h"

namespace fsys = std::filesystem;
using fid::index::FileKind;
using fid::index::Store;
using fid::testutil::PackedStore;

namespace {

using fid::testutil::TempDir;
using fid::testutil::flip_byte;
using fid::testutil::make_tree;
using fid::testutil::open_error;
using fid::testutil::open_store;
using fid::testutil::pack;
using fid::testutil::pack_options;
using fid::testutil::read_file;
using fid::testutil::try_pack;
using fid::testutil::write_file;

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

TEST(Store, PieceChecksumIsTheLowHalfOfXxh3AtEverySize) {
  // The documented checksum (docs/FORMAT.md): the low 32 bits of XXH3-64, seed 0, whichever vector
  // unit computes it; XXH3-64 of nothing is 0x2D06800538D394C2 (the xxHash specification).
  EXPECT_EQ(fid::index::piece_checksum({}), 0x38D394C2u);
  std::vector<uint8_t> bytes(100007 + 7);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t at : {size_t{0}, size_t{7}})  // an unaligned start too
    for (size_t n : {1, 3, 16, 17, 128, 129, 240, 241, 1024, 4096, 65536, 100007}) {
      const std::span<const uint8_t> piece(bytes.data() + at, n);
      EXPECT_EQ(fid::index::piece_checksum(piece), static_cast<uint32_t>(XXH3_64bits(piece.data(), n))) << at << " " << n;
    }
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

// The videos table (a store packed with --video-frames): read without a frame decoded, the same
// from the index and from a mapped tables file; a row that does not describe a folder and its
// files is refused, naming the folder.
TEST(Store, VideosTableGivesEachClipFoldersVideoAndIsChecked) {
  TempDir t;
  make_tree(t.path() / "src");
  pack(t.path() / "src", t.path() / "store");
  const fsys::path db = t.path() / "store/index.sqlite";
  uint32_t cat = 0, cat_files = 0;
  {
    const std::unique_ptr<Store> s = open_store(t.path() / "store");
    for (const auto& d : s->dirs())
      if (s->name(d) == "cat") cat = d.id, cat_files = d.file_count;
    ASSERT_NE(cat, 0u);
    EXPECT_TRUE(s->videos().empty());
    EXPECT_EQ(s->video_of(cat), nullptr);
  }
  sql(db, fid::index::kVideosSchema);
  sql(db, fmt::format("INSERT INTO videos VALUES ({}, CAST('cat.mp4' AS BLOB), 123456, 'h264', 30000, 1001, 1920, 1080, {})",
                      cat, cat_files));
  auto check = [&](const Store& s) {
    const fid::index::VideoSource* v = s.video_of(cat);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->name, "cat.mp4");
    EXPECT_EQ(v->source_size, 123456u);
    EXPECT_EQ(v->codec, "h264");
    EXPECT_EQ(v->fps_num, 30000u);
    EXPECT_EQ(v->fps_den, 1001u);
    EXPECT_EQ(v->width, 1920u);
    EXPECT_EQ(v->height, 1080u);
    EXPECT_EQ(v->frames, cat_files);
    EXPECT_EQ(s.video_of(0), nullptr);
    EXPECT_EQ(s.videos().size(), 1u);
  };
  check(*open_store(t.path() / "store"));
  const fsys::path tables = t.path() / "tables";
  fsys::create_directories(tables);
  fsys::permissions(tables, fsys::perms::owner_all);
  for (int open = 0; open < 2; ++open) {  // made from the index, then mapped as it is
    auto mapped = Store::open(t.path() / "store", tables);
    ASSERT_TRUE(mapped.ok()) << mapped.error().message;
    EXPECT_FALSE((*mapped)->tables_file().empty()) << (*mapped)->tables_problem();
    check(**mapped);
  }
  auto expect_error = [&](const std::string& change, const std::string& fragment) {
    sql(db, "CREATE TABLE saved_videos AS SELECT * FROM videos; " + change);
    const std::string e = open_error(t.path() / "store");
    EXPECT_NE(e.find(fragment), std::string::npos) << change << ": " << e;
    sql(db, "DELETE FROM videos; INSERT INTO videos SELECT * FROM saved_videos; DROP TABLE saved_videos");
  };
  expect_error("UPDATE videos SET frames = frames + 1", fmt::format("video of folder {} says {} frames, the folder holds {}", cat, cat_files + 1, cat_files));
  expect_error("UPDATE videos SET dir = 0", "video of folder 0 has a value out of range");
  expect_error("UPDATE videos SET fps_den = 0", "has a value out of range");
  expect_error("UPDATE videos SET width = -1", "has a value out of range");
  expect_error("UPDATE videos SET name = x''", "has a value out of range");
  check(*open_store(t.path() / "store"));
}

namespace {

// Turns files `victims` of the store at `dir` into unreferenced rows, as an append with --replace
// leaves the files it replaced (docs/FORMAT.md "unreferenced"): their rows gone, the remaining
// files renumbered, their pieces kept in their slots. Returns the victims' piece bytes.
uint64_t unreference(const fsys::path& dir, const std::vector<uint32_t>& victims) {
  auto s = Store::open(dir);
  EXPECT_TRUE(s.ok()) << s.error().message;
  uint64_t bytes = 0;
  std::string ids;
  for (uint32_t id : victims) {
    for (const auto& p : (*s)->pieces((*s)->files()[id])) bytes += p.size;
    ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  }
  sql(dir / "index.sqlite",
      fmt::format("BEGIN; UPDATE meta SET value = '6' WHERE key = 'format_version';"
                  "CREATE TABLE IF NOT EXISTS clips(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, record INTEGER "
                  "NOT NULL, first_slot INTEGER NOT NULL, frames INTEGER NOT NULL);"
                  "{1}"
                  "INSERT INTO unreferenced SELECT record, slot, pieces FROM files WHERE id IN ({0});"
                  "CREATE TABLE kept AS SELECT * FROM files WHERE id NOT IN ({0}); DELETE FROM files;"
                  "INSERT INTO files SELECT row_number() OVER (ORDER BY id) - 1, dir, name, kind, script, record, "
                  "slot, width, height, source_size, mtime_ns, pieces, note FROM kept; DROP TABLE kept; COMMIT;",
                  ids, fid::index::kUnreferencedSchema));
  return bytes;
}

// Files with unreferenced pieces before, between and after them in their records (scan, file and
// whole records) read as before: the loader steps over those pieces, numbers each record's files
// 0..n-1, maps them so from a tables file, counts the bytes, and refuses rows that do not fit.
void check_unreferenced_pieces_are_stepped_over(const fsys::path& dir, const Store& before) {
  std::map<std::string, std::vector<fid::index::Piece>> want;
  std::map<std::string, std::string> bytes;
  std::vector<uint32_t> victims;
  for (const auto& r : before.records()) {
    const auto members = before.record_files(r.id);
    if (members.size() >= 3 && victims.size() < 2) victims.push_back(members[victims.empty() ? 1 : members.size() - 1]);
    if (r.layout == fid::index::RecordLayout::whole) victims.push_back(members[0]);
  }
  ASSERT_EQ(victims.size(), 3u);
  for (const auto& f : before.files()) {
    if (std::find(victims.begin(), victims.end(), f.id) != victims.end()) continue;
    const auto p = before.pieces(f);
    want[before.relative_path(f)] = {p.begin(), p.end()};
    bytes[before.relative_path(f)] = read_file(before, f);
  }
  const uint64_t gone = unreference(dir, victims);
  const TempDir tables;
  for (int opening = 0; opening < 3; ++opening) {  // from the index, making the tables file, mapping it
    auto s = Store::open(dir, opening == 0 ? fsys::path() : tables.path());
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ((*s)->format_version(), 6);
    EXPECT_EQ((*s)->unreferenced_bytes(), gone);
    ASSERT_EQ((*s)->files().size(), want.size());
    for (const auto& f : (*s)->files()) {
      const auto p = (*s)->pieces(f);
      const std::string rel = (*s)->relative_path(f);
      ASSERT_TRUE(want.count(rel)) << rel;
      ASSERT_EQ(p.size(), want[rel].size());
      for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i].offset, want[rel][i].offset) << rel << " piece " << i;
      int rc = -1;
      EXPECT_EQ(read_file(**s, f, &rc), bytes[rel]) << rel;
      EXPECT_EQ(rc, 0);
    }
    for (const auto& r : (*s)->records())
      for (uint32_t k = 0; k < (*s)->record_files(r.id).size(); ++k)
        EXPECT_EQ((*s)->files()[(*s)->record_files(r.id)[k]].slot, k);
  }
  const auto db = dir / "index.sqlite";
  auto expect_error = [&](const std::string& fragment) {
    const std::string e = open_error(dir);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  sql(db, "CREATE TABLE saved AS SELECT * FROM unreferenced");
  sql(db, "INSERT INTO unreferenced SELECT record, slot, pieces FROM files WHERE id = 0");
  expect_error("its slots and its unreferenced ones are not");
  sql(db, "DELETE FROM unreferenced; INSERT INTO unreferenced SELECT * FROM saved");
  sql(db, "UPDATE unreferenced SET pieces = substr(pieces, 1, 5) WHERE rowid = 1");
  expect_error("pieces");
  sql(db, "DELETE FROM unreferenced; INSERT INTO unreferenced SELECT * FROM saved");
  sql(db, "UPDATE unreferenced SET record = 9999 WHERE rowid = 1");
  expect_error("an unreferenced row has record 9999");
  sql(db, "DELETE FROM unreferenced; INSERT INTO unreferenced SELECT * FROM saved");
  sql(db, "UPDATE meta SET value = '5' WHERE key = 'format_version'");  // gaps without the table
  expect_error("slots are not");
  sql(db, "UPDATE meta SET value = '6' WHERE key = 'format_version'; DROP TABLE unreferenced");
  expect_error("unreferenced");
}

}  // namespace

TEST_F(PackedStore, UnreferencedPiecesInScanAndWholeRecordsAreSteppedOver) {
  check_unreferenced_pieces_are_stepped_over(path(), store());
}

TEST_F(FileLayoutStore, UnreferencedPiecesInFileRecordsAreSteppedOver) {
  check_unreferenced_pieces_are_stepped_over(path(), store());
}
