// pack --shard and merge: the shard spec, the walk order, the source digest, and merges of the
// parts of a small tree of blobs (the merged index against a single pack; refused sets of parts).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pack/merge.h"
#include "pack/packer.h"
#include "pack/shard.h"
#include "sources/pack_source.h"
#include "index/store.h"
#include "test_files.h"
#include "test_result.h"

namespace fsys = std::filesystem;
using fid::pack::Shard;
using fid::testutil::TempDir;

namespace {

TEST(ShardSpec, ParsesIOverN) {
  EXPECT_EQ(fid::testutil::value_or_throw(fid::pack::parse_shard("0/1")), (Shard{0, 1}));
  EXPECT_EQ(fid::testutil::value_or_throw(fid::pack::parse_shard("2/3")), (Shard{2, 3}));
  EXPECT_EQ(fid::pack::shard_text(Shard{4, 16}), "4/16");
}

TEST(ShardSpec, RefusesBadSpecsNamingThem) {
  for (const char* spec : {"3/2", "0/0", "x/2", "1/", "/2", "2", "", "1/2/3", "-1/2", " 1/2", "1/2 ", "1/99999999999"}) {
    const fid::Result<Shard> s = fid::pack::parse_shard(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_EQ(s.error().code, EINVAL);
    EXPECT_NE(s.error().message.find(std::string("'") + spec + "'"), std::string::npos) << s.error().message;
  }
}

TEST(ShardSpec, EveryPathHasOnePartSpreadOverAll) {
  std::vector<int> counts(4);
  for (int i = 0; i < 4000; ++i) counts[fid::pack::shard_of("class/" + std::to_string(i) + ".jpg", 4)]++;
  for (int c : counts) EXPECT_GT(c, 800);
  EXPECT_EQ(fid::pack::shard_of("anything", 1), 0u);
  // XXH64("", 0) = 0xEF46DB3751D8E999: the hash is the documented one.
  EXPECT_EQ(fid::pack::shard_of("", 1000), 0xEF46DB3751D8E999ull % 1000);
}

TEST(WalkOrder, FolderContentsFollowTheFolder) {
  using fid::sources::walk_less;
  EXPECT_TRUE(walk_less("a/b/1.jpg", "a/c.jpg"));
  EXPECT_TRUE(walk_less("a/z", "a.jpg"));  // '/' below '.'
  EXPECT_TRUE(walk_less("a", "a/b"));
  EXPECT_FALSE(walk_less("a/b", "a/b"));
  EXPECT_TRUE(walk_less("a/\x01", "a/\xff"));
}

TEST(SourceDigest, CoversPathsSizesAndFolders) {
  fid::sources::SourceTree t;
  t.dirs.push_back({0, "", "", 0});
  t.dirs.push_back({0, "cls", "cls", 0});
  ASSERT_TRUE(t.files.add(1, "a.jpg", 10));
  const std::string d = fid::pack::source_digest(t);
  EXPECT_EQ(d.size(), 16u);
  fid::sources::SourceTree same;  // the same tree, made again (a listing is not copied)
  same.dirs = t.dirs;
  ASSERT_TRUE(same.files.add(1, "a.jpg", 10));
  fid::sources::SourceTree other;
  other.dirs = t.dirs;
  ASSERT_TRUE(other.files.add(1, "a.jpg", 11));
  EXPECT_NE(fid::pack::source_digest(other), d);
  other = {};
  other.dirs = t.dirs;
  other.dirs.push_back({0, "empty", "empty", 0});
  ASSERT_TRUE(other.files.add(1, "a.jpg", 10));
  EXPECT_NE(fid::pack::source_digest(other), d);
  EXPECT_EQ(fid::pack::source_digest(same), d);
}

void write_file(const fsys::path& p, const std::string& bytes) {
  fsys::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// Blobs in nested folders, so that walk order and (folder, name) order differ.
void make_tree(const fsys::path& src) {
  for (int i = 0; i < 60; ++i) {
    const std::string dir = i % 3 == 0 ? "a" : i % 3 == 1 ? "a/b" : "c";
    write_file(src / dir / (std::to_string(i) + ".bin"), std::string(static_cast<size_t>(50 + i * 131), char('a' + i % 26)));
  }
  write_file(src / "a.bin", "top");
  fsys::create_directories(src / "empty");
}

fid::pack::PackOptions options(const fsys::path& src, const fsys::path& store, Shard shard) {
  fid::pack::PackOptions opt;
  opt.sources = {src};
  opt.store = store;
  opt.jobs = 2;
  opt.record_bytes = 4096;
  opt.seed = 5;
  opt.shard = shard;
  return opt;
}

void pack(const fid::pack::PackOptions& opt) {
  std::atomic<bool> cancel{false};
  fid::testutil::value_or_throw(fid::pack::pack(opt, nullptr, cancel));
}

std::vector<std::string> rows(const fsys::path& store, const char* sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2((store / "index.sqlite").c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, sql, -1, &st, nullptr);
  std::vector<std::string> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    std::string row;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      const auto* b = static_cast<const char*>(sqlite3_column_blob(st, c));
      row.append(b ? b : "", static_cast<size_t>(sqlite3_column_bytes(st, c))).push_back('|');
    }
    out.push_back(row);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

class Merge : public ::testing::Test {
 protected:
  void SetUp() override {
    make_tree(tmp.path() / "src");
    pack(options(tmp.path() / "src", tmp.path() / "single", Shard{}));
    for (uint32_t i = 0; i < 3; ++i) parts.push_back(part(i, 3));
  }
  fsys::path part(uint32_t i, uint32_t n, const std::string& tag = "") {
    const fsys::path p = tmp.path() / ("part" + tag + std::to_string(i));
    pack(options(tmp.path() / "src", p, Shard{i, n}));
    return p;
  }
  fid::Result<fid::pack::MergeReport> merge(const std::vector<fsys::path>& ps) {
    return fid::pack::merge(ps, tmp.path() / "merged", cancel);
  }
  std::string refused(const std::vector<fsys::path>& ps) {
    const fid::Result<fid::pack::MergeReport> r = merge(ps);
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(fsys::exists(tmp.path() / "merged"));
    return r.ok() ? "" : r.error().message;
  }
  TempDir tmp;
  std::vector<fsys::path> parts;
  std::atomic<bool> cancel{false};
};

TEST_F(Merge, MergedIndexIsTheSinglePacksAndServesIt) {
  const auto report = fid::testutil::value_or_throw(merge({parts[2], parts[0], parts[1]}));
  EXPECT_EQ(report.parts, 3u);
  const fsys::path merged = tmp.path() / "merged", single = tmp.path() / "single";
  const char* files = "SELECT id, dir, name, kind, source_size, pieces FROM files ORDER BY id";
  EXPECT_EQ(rows(merged, files), rows(single, files));
  EXPECT_EQ(rows(merged, "SELECT * FROM dirs ORDER BY id"), rows(single, "SELECT * FROM dirs ORDER BY id"));
  EXPECT_EQ(rows(merged, "SELECT value FROM meta WHERE key = 'shard'"), std::vector<std::string>{"0/1|"});
  // Each part's records keep their header ids; the store loads and its records pass the header check.
  auto store = fid::testutil::value_or_throw(fid::index::Store::open(merged));
  size_t renumbered = 0;
  for (const auto& r : store->records()) renumbered += r.header_id != r.id;
  EXPECT_GT(renumbered, 0u);
  struct stat st {};
  ASSERT_EQ(::stat((merged / store->records()[0].path).c_str(), &st), 0);
  EXPECT_GE(st.st_nlink, 2u);  // linked, not copied
}

TEST_F(Merge, RefusesGapsOverlapsAndOtherPacks) {
  std::string m = refused({parts[0], parts[2]});
  EXPECT_NE(m.find("shard 1 of 3 missing"), std::string::npos) << m;
  m = refused({parts[0], parts[1], parts[1], parts[2]});
  EXPECT_NE(m.find("both are shard 1/3"), std::string::npos) << m;
  const fsys::path other_n = part(1, 2, "n");
  m = refused({parts[0], other_n, parts[2]});
  EXPECT_NE(m.find(other_n.string()), std::string::npos) << m;
  auto reseeded = options(tmp.path() / "src", tmp.path() / "seeded", Shard{1, 3});
  reseeded.seed = 6;
  pack(reseeded);
  m = refused({parts[0], reseeded.store, parts[2]});
  EXPECT_NE(m.find("seed"), std::string::npos) << m;
  m = refused({parts[0], tmp.path() / "src", parts[2]});
  EXPECT_NE(m.find("not a fidelityfs store"), std::string::npos) << m;
  // A store whose files an append replaced (format 6) keeps pieces no file references: not a part.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((parts[1] / "index.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '6' WHERE key = 'format_version'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  m = refused({parts[0], parts[1], parts[2]});
  EXPECT_NE(m.find("a store whose files an append replaced (format 6); relayout it first"), std::string::npos) << m;
}

}  // namespace

namespace {

// Format 2 had no records.header_id: a reader takes the record's id.
TEST(HeaderId, FormatTwoTakesTheRecordId) {
  TempDir tmp;
  make_tree(tmp.path() / "src");
  fid::pack::PackOptions opt = options(tmp.path() / "src", tmp.path() / "store", Shard{});
  opt.layout = fid::index::StoreLayout::scan;  // format 2 had no other
  pack(opt);
  const std::string db = (tmp.path() / "store/index.sqlite").string();
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h,
                         "ALTER TABLE records DROP COLUMN header_id; "
                         "UPDATE meta SET value = '2' WHERE key = 'format_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(h);
  auto store = fid::testutil::value_or_throw(fid::index::Store::open(tmp.path() / "store"));
  EXPECT_EQ(store->format_version(), 2);
  ASSERT_GT(store->records().size(), 1u);
  for (const auto& r : store->records()) EXPECT_EQ(r.header_id, r.id);
}

}  // namespace
