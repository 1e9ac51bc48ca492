// See append_index.h.
#include "pack/append_index.h"

#include "pack/append.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <string>

#include "common/numbers.h"
#include "index/format.h"
#include "index/store.h"

namespace fid::pack {

namespace fsys = std::filesystem;

namespace {

std::string as_string(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
std::string join_path(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

fid::Result<std::map<std::string, std::string>> read_meta(const index::SqliteDb& db) {
  std::map<std::string, std::string> meta;
  fid::Result<index::SqliteStatement> q = db.prepare("SELECT key, value FROM meta");
  if (!q) return std::move(q).error();
  if (fid::Status read = q->each_row([&]() -> fid::Status {
        meta[q->text(0)] = q->text(1);
        return {};
      });
      !read)
    return std::move(read).error();
  return meta;
}

// Writes the union index of the store and the appended part into `to` (docs/FORMAT.md
// "Appended stores").
class UnionWriter {
 public:
  UnionWriter(const index::SqliteDb& old_db, const AppendTree& old, const index::SqliteDb& part_db, const AppendTree& part,
              const PartRecordPath& part_record_path)
      : old_db_(old_db), old_(old), part_db_(part_db), part_(part), part_record_path_(part_record_path) {}

  fid::Status write(const fsys::path& to);

 private:
  fid::Status write_meta();
  fid::Status write_dirs();
  fid::Status write_records();
  fid::Status write_files();
  fid::Status write_skipped();
  fid::Status write_clips();
  fid::Status write_videos();
  fid::Status write_unreferenced();

  const index::SqliteDb& old_db_;
  const AppendTree& old_;
  const index::SqliteDb& part_db_;
  const AppendTree& part_;
  const PartRecordPath& part_record_path_;
  std::unique_ptr<index::SqliteDb> db_;
  // The store's files that the part's replace: their record, slot and pieces (write_files).
  struct Replaced {
    int64_t record = 0, slot = 0;
    std::vector<uint8_t> pieces;
  };
  std::vector<Replaced> replaced_;
  bool unreferenced_ = false;  // the union has an unreferenced table
  std::vector<int64_t> old_dir_, part_dir_;  // new folder id by the old store's, by the part's
  bool clips_ = false;
};

fid::Status UnionWriter::write(const fsys::path& to) {
  fid::Result<std::unique_ptr<index::SqliteDb>> db = index::SqliteDb::open(to.string(), /*writable=*/true);
  if (!db) return std::move(db).error();
  db_ = std::move(db).value();
  fid::Status s = db_->exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;");
  if (s) s = db_->exec(index::kSchema);
  if (s) s = db_->exec("BEGIN");
  if (s) s = write_meta();
  if (s) s = write_dirs();
  if (s) s = write_records();
  if (s) s = write_files();
  if (s) s = write_skipped();
  if (s) s = write_clips();
  if (s) s = write_videos();
  if (s) s = write_unreferenced();
  if (s) s = db_->exec("COMMIT");
  return s;
}

fid::Status UnionWriter::write_meta() {
  fid::Result<std::map<std::string, std::string>> old_meta = read_meta(old_db_), part_meta = read_meta(part_db_);
  if (!old_meta) return std::move(old_meta).error();
  if (!part_meta) return std::move(part_meta).error();
  std::map<std::string, std::string> meta = *old_meta;
  unreferenced_ = old_.unreferenced || replaced_files(old_, part_) > 0;
  const uint64_t version = std::max({parse_u64(meta["format_version"]).value_or(0),
                                     parse_u64((*part_meta)["format_version"]).value_or(0),
                                     static_cast<uint64_t>(unreferenced_ ? index::kUnreferencedFormatVersion : 0)});
  clips_ = version >= static_cast<uint64_t>(index::kClipsFormatVersion);
  meta["format_version"] = std::to_string(version);
  meta["appends"] = std::to_string(parse_u64(meta["appends"]).value_or(0) + 1);
  meta["created_unix"] = (*part_meta)["created_unix"];
  meta.try_emplace("layout", (*part_meta)["layout"]);
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  for (const auto& [key, value] : meta) {
    st->bind(1, std::string_view(key));
    st->bind(2, std::string_view(value));
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

// Every folder of either, in walk order (a depth-first walk, children bytewise), renumbered; a
// folder in both keeps the newer listing's mtime.
fid::Status UnionWriter::write_dirs() {
  struct Dir {
    int64_t mtime = 0;
    int64_t old_id = -1, part_id = -1;
  };
  std::map<std::string, Dir, decltype(&sources::walk_less)> all(&sources::walk_less);
  for (size_t i = 0; i < old_.dirs.size(); ++i) all[old_.dirs[i]] = Dir{old_.dir_mtimes[i], static_cast<int64_t>(i), -1};
  for (size_t i = 0; i < part_.dirs.size(); ++i) {
    Dir& d = all[part_.dirs[i]];
    d.mtime = part_.dir_mtimes[i];
    d.part_id = static_cast<int64_t>(i);
  }
  old_dir_.assign(old_.dirs.size(), -1);
  part_dir_.assign(part_.dirs.size(), -1);
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO dirs(id, parent, name, mtime_ns) VALUES (?1, ?2, ?3, ?4)");
  if (!st) return std::move(st).error();
  std::map<std::string, int64_t> ids;
  int64_t id = 0;
  for (const auto& [rel, d] : all) {
    const size_t slash = rel.rfind('/');
    const std::string parent = slash == std::string::npos ? std::string() : rel.substr(0, slash);
    const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    st->bind(1, id);
    st->bind(2, rel.empty() ? 0 : ids.at(parent));
    st->bind_blob(3, std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()));
    st->bind(4, d.mtime);
    if (fid::Status ran = st->run(); !ran) return ran;
    ids[rel] = id;
    if (d.old_id >= 0) old_dir_[static_cast<size_t>(d.old_id)] = id;
    if (d.part_id >= 0) part_dir_[static_cast<size_t>(d.part_id)] = id;
    ++id;
  }
  return {};
}

// The store's records as they are, then the part's after them: record r of the part is
// old.records + r, at the path part_record_path gives; its header keeps the part's id (header_id).
fid::Status UnionWriter::write_records() {
  fid::Result<index::SqliteStatement> st = db_->prepare(
      "INSERT INTO records(id, path, layout, size, region_ends, header_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!st) return std::move(st).error();
  for (const index::SqliteDb* db : {&old_db_, &part_db_}) {
    const int64_t base = db == &old_db_ ? 0 : old_.records;
    fid::Result<index::SqliteStatement> q =
        db->prepare("SELECT id, path, layout, size, region_ends, header_id FROM records ORDER BY id");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      const int64_t id = q->integer(0) + base;
      st->bind(1, id);
      const std::string path = base == 0 ? q->text(1) : part_record_path_(static_cast<uint32_t>(id));
      st->bind(2, std::string_view(path));
      st->bind(3, q->integer(2));
      st->bind(4, q->integer(3));
      st->bind_blob(5, q->blob(4));
      st->bind(6, q->integer(5));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

// Both stores' files in walk order of their paths (each is in it already: a two-way merge),
// renumbered from 0, folders and the part's records moved. Where both have a path (--replace)
// the part's file is taken and the store's goes to replaced_.
fid::Status UnionWriter::write_files() {
  constexpr const char* kSelect =
      "SELECT dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, pieces, note FROM files "
      "ORDER BY id";
  fid::Result<index::SqliteStatement> a = old_db_.prepare(kSelect), b = part_db_.prepare(kSelect);
  if (!a) return std::move(a).error();
  if (!b) return std::move(b).error();
  fid::Result<index::SqliteStatement> st =
      db_->prepare("INSERT INTO files(id, dir, name, kind, script, record, slot, width, height, source_size, "
                   "mtime_ns, pieces, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  if (!st) return std::move(st).error();
  struct Cursor {
    index::SqliteStatement* q;
    const std::vector<std::string>* paths;
    const std::vector<int64_t>* dir_map;
    int64_t record_base;
    size_t at = 0;
    bool more = false;
  };
  Cursor cur[2] = {{&*a, &old_.files, &old_dir_, 0}, {&*b, &part_.files, &part_dir_, old_.records}};
  for (Cursor& c : cur) {
    fid::Result<bool> row = c.q->step();
    if (!row) return std::move(row).error();
    c.more = *row;
  }
  auto advance = [](Cursor& c) -> fid::Status {
    ++c.at;
    fid::Result<bool> row = c.q->step();
    if (!row) return std::move(row).error();
    c.more = *row;
    return {};
  };
  for (int64_t id = 0; cur[0].more || cur[1].more; ++id) {
    if (cur[0].more && cur[1].more && (*cur[0].paths)[cur[0].at] == (*cur[1].paths)[cur[1].at]) {
      const index::SqliteStatement& q = *cur[0].q;
      const std::span<const uint8_t> pieces = q.blob(10);
      replaced_.push_back(Replaced{q.integer(4), q.integer(5), {pieces.begin(), pieces.end()}});
      if (fid::Status next = advance(cur[0]); !next) return next;
    }
    const bool take_part = !cur[0].more || (cur[1].more && sources::walk_less((*cur[1].paths)[cur[1].at], (*cur[0].paths)[cur[0].at]));
    Cursor& c = cur[take_part ? 1 : 0];
    const index::SqliteStatement& q = *c.q;
    st->bind(1, id);
    st->bind(2, (*c.dir_map).at(static_cast<size_t>(q.integer(0))));
    st->bind_blob(3, q.blob(1));
    for (int col = 2; col <= 9; ++col) st->bind(col + 2, q.integer(col));  // kind .. mtime_ns
    st->bind(6, q.integer(4) + c.record_base);
    st->bind_blob(12, q.blob(10));
    const std::string note = q.text(11);
    st->bind(13, std::string_view(note));
    if (fid::Status ran = st->run(); !ran) return ran;
    if (fid::Status next = advance(c); !next) return next;
  }
  return {};
}

// The store's unreferenced rows as they are (its records keep their ids), then those of the files
// the part replaced.
fid::Status UnionWriter::write_unreferenced() {
  if (!unreferenced_) return {};
  if (fid::Status made = db_->exec(index::kUnreferencedSchema); !made) return made;
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO unreferenced(record, slot, pieces) VALUES (?1, ?2, ?3)");
  if (!st) return std::move(st).error();
  if (old_.unreferenced) {
    fid::Result<index::SqliteStatement> q = old_db_.prepare("SELECT record, slot, pieces FROM unreferenced");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      st->bind(1, q->integer(0));
      st->bind(2, q->integer(1));
      st->bind_blob(3, q->blob(2));
      return st->run();
    });
    if (!copied) return copied;
  }
  for (const Replaced& r : replaced_) {
    st->bind(1, r.record);
    st->bind(2, r.slot);
    st->bind_blob(3, r.pieces);
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

fid::Status UnionWriter::write_skipped() {
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO skipped(path, reason) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  std::unordered_set<std::string> seen;
  for (const index::SqliteDb* db : {&old_db_, &part_db_}) {
    fid::Result<index::SqliteStatement> q = db->prepare("SELECT path, reason FROM skipped");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      if (!seen.insert(as_string(q->blob(0))).second) return {};
      st->bind_blob(1, q->blob(0));
      const std::string reason = q->text(1);
      st->bind(2, std::string_view(reason));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

// The store's clip runs, then the part's (whose records follow): record and slot order holds.
fid::Status UnionWriter::write_clips() {
  if (!clips_) return {};
  if (fid::Status made = db_->exec(index::kClipsSchema); !made) return made;
  fid::Result<index::SqliteStatement> st =
      db_->prepare("INSERT INTO clips(id, dir, record, first_slot, frames) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!st) return std::move(st).error();
  int64_t id = 0;
  for (const index::SqliteDb* db : {&old_db_, &part_db_}) {
    fid::Result<bool> has = db->has_table("clips");
    if (!has) return std::move(has).error();
    if (!*has) continue;
    const bool part = db == &part_db_;
    const std::vector<int64_t>& dir_map = part ? part_dir_ : old_dir_;
    fid::Result<index::SqliteStatement> q = db->prepare("SELECT dir, record, first_slot, frames FROM clips ORDER BY id");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      const int64_t dir = q->integer(0);
      if (dir < 0 || static_cast<size_t>(dir) >= dir_map.size())
        return fid::Error{EINVAL, fmt::format("{}: corrupt index: clip of folder {}", db->path(), dir)};
      st->bind(1, id++);
      st->bind(2, dir_map[static_cast<size_t>(dir)]);
      st->bind(3, q->integer(1) + (part ? old_.records : 0));
      st->bind(4, q->integer(2));
      st->bind(5, q->integer(3));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

fid::Status UnionWriter::write_videos() {
  constexpr const char* kColumns = "dir, name, source_size, codec, fps_num, fps_den, width, height, frames";
  bool made = false;
  for (const index::SqliteDb* db : {&old_db_, &part_db_}) {
    fid::Result<bool> has = db->has_table("videos");
    if (!has) return std::move(has).error();
    if (!*has) continue;
    if (!made) {
      if (fid::Status m = db_->exec(index::kVideosSchema); !m) return m;
      made = true;
    }
    const std::vector<int64_t>& dir_map = db == &part_db_ ? part_dir_ : old_dir_;
    fid::Result<index::SqliteStatement> q = db->prepare(fmt::format("SELECT {} FROM videos", kColumns).c_str());
    if (!q) return std::move(q).error();
    fid::Result<index::SqliteStatement> st =
        db_->prepare(fmt::format("INSERT INTO videos({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", kColumns).c_str());
    if (!st) return std::move(st).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      const int64_t dir = q->integer(0);
      if (dir < 0 || static_cast<size_t>(dir) >= dir_map.size())
        return fid::Error{EINVAL, fmt::format("{}: corrupt index: video of folder {}", db->path(), dir)};
      st->bind(1, dir_map[static_cast<size_t>(dir)]);
      st->bind_blob(2, q->blob(1));
      st->bind(3, q->integer(2));
      st->bind(4, std::string_view(q->text(3)));
      for (int c = 4; c < 9; ++c) st->bind(c + 1, q->integer(c));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

}  // namespace

void stop_here_for_tests(const char* phase) {
  const char* want = std::getenv("FIDELITYFS_APPEND_STOP");
  if (want && std::strcmp(want, phase) == 0) ::raise(SIGSTOP);
}

fid::Result<std::unique_ptr<index::SqliteDb>> open_append_index(const fsys::path& store) {
  std::error_code ec;
  if (!fsys::is_regular_file(store / index::kIndexFile, ec))
    return fid::Error{ENOENT, fmt::format("{}: not a fidelityfs store (no {}): pack --append adds to a store that "
                                          "exists", store.string(), index::kIndexFile)};
  return index::SqliteDb::open((store / index::kIndexFile).string(), /*writable=*/false);
}

fid::Result<AppendTree> read_append_tree(const index::SqliteDb& db, const std::string& name) {
  AppendTree t;
  auto corrupt = [&](const std::string& what) { return fid::Error{EINVAL, fmt::format("{}: corrupt index: {}", name, what)}; };
  fid::Result<index::SqliteStatement> d = db.prepare("SELECT id, parent, name, mtime_ns FROM dirs ORDER BY id");
  if (!d) return std::move(d).error();
  fid::Status read = d->each_row([&]() -> fid::Status {
    const int64_t id = d->integer(0), parent = d->integer(1);
    if (id != static_cast<int64_t>(t.dirs.size()) || parent < 0 || (id > 0 && parent >= id))
      return corrupt(fmt::format("folder {}", id));
    t.dirs.push_back(id == 0 ? std::string() : join_path(t.dirs[static_cast<size_t>(parent)], as_string(d->blob(2))));
    t.dir_mtimes.push_back(d->integer(3));
    return {};
  });
  if (!read) return std::move(read).error();
  if (t.dirs.empty()) return corrupt("no root folder");
  fid::Result<index::SqliteStatement> f = db.prepare("SELECT dir, name FROM files ORDER BY id");
  if (!f) return std::move(f).error();
  read = f->each_row([&]() -> fid::Status {
    const int64_t dir = f->integer(0);
    if (dir < 0 || static_cast<size_t>(dir) >= t.dirs.size()) return corrupt(fmt::format("a file's folder {}", dir));
    t.files.push_back(join_path(t.dirs[static_cast<size_t>(dir)], as_string(f->blob(1))));
    return {};
  });
  if (!read) return std::move(read).error();
  // The folders of an optional table's rows (clips, videos) by path.
  const auto folders_of = [&](const char* table, const char* what, std::unordered_set<std::string>& out) -> fid::Status {
    fid::Result<bool> has = db.has_table(table);
    if (!has || !*has) return has ? fid::Status{} : fid::Status{std::move(has).error()};
    fid::Result<index::SqliteStatement> q = db.prepare(fmt::format("SELECT DISTINCT dir FROM {}", table).c_str());
    if (!q) return std::move(q).error();
    return q->each_row([&]() -> fid::Status {
      const int64_t dir = q->integer(0);
      if (dir < 0 || static_cast<size_t>(dir) >= t.dirs.size()) return corrupt(fmt::format("{}'s folder {}", what, dir));
      out.insert(t.dirs[static_cast<size_t>(dir)]);
      return {};
    });
  };
  if (fid::Status clips = folders_of("clips", "a clip", t.clip_dirs); !clips) return std::move(clips).error();
  if (fid::Status videos = folders_of("videos", "a video", t.video_dirs); !videos) return std::move(videos).error();
  fid::Result<bool> has_unreferenced = db.has_table("unreferenced");
  if (!has_unreferenced) return std::move(has_unreferenced).error();
  t.unreferenced = *has_unreferenced;
  fid::Result<index::SqliteStatement> r = db.prepare("SELECT count(*), coalesce(max(id), -1) FROM records");
  if (!r) return std::move(r).error();
  fid::Result<bool> row = r->step();
  if (!row) return std::move(row).error();
  if (!*row || r->integer(1) + 1 != r->integer(0)) return corrupt("record ids are not 0..n-1");
  t.records = static_cast<uint32_t>(r->integer(0));
  return t;
}

// The source's paths that the store has already (as a file, or as a file where the source has
// a folder, or the reverse; with `replace`, a file where it has a file is let through); an error
// naming the first ones.
fid::Status refuse_existing(const AppendTree& old, const sources::SourceTree& tree, const std::string& store, bool replace) {
  const std::unordered_set<std::string> files(old.files.begin(), old.files.end());
  const std::unordered_set<std::string> dirs(old.dirs.begin(), old.dirs.end());
  std::vector<std::string> clash;
  size_t count = 0;
  auto note = [&](std::string rel) {
    if (clash.size() < 5) clash.push_back(std::move(rel));
    ++count;
  };
  std::vector<std::string> into_clip;   // a clip's frames lie together: a clip of the store takes no more
  std::vector<std::string> into_video;  // a video's folder holds the frames its row counts
  for (uint32_t i = 0; i < tree.files.size(); ++i) {
    std::string rel = tree.rel(i);
    const std::string& folder = tree.dirs[tree.files.dir(i)].rel;
    const bool into_a_clip = old.clip_dirs.count(folder) > 0;
    if (dirs.count(rel) || (files.count(rel) && !(replace && !into_a_clip))) note(std::move(rel));
    else if (into_a_clip && into_clip.size() < 5) into_clip.push_back(rel);
    else if (!files.count(rel) && old.video_dirs.count(folder) && into_video.size() < 5) into_video.push_back(rel);
  }
  if (count == 0 && !into_clip.empty())
    return fid::Error{EEXIST, fmt::format("{}: the source adds files to a clip folder of the store ({}): a clip's frames "
                                          "lie together, so an append adds whole clips only", store,
                                          fmt::join(into_clip, ", "))};
  if (count == 0 && !into_video.empty())
    return fid::Error{EEXIST, fmt::format("{}: the source adds files to a folder the store made from a video ({}): "
                                          "that folder holds the video's frames only", store, fmt::join(into_video, ", "))};
  for (const index::VideoSource& v : tree.videos)
    if (dirs.count(tree.dirs[v.dir].rel))
      return fid::Error{EEXIST, fmt::format("{}: the store has a folder '{}' already, where the source's video '{}' would "
                                            "put its frames: an append adds a video's frames as a new folder", store,
                                            tree.dirs[v.dir].rel, v.name)};
  for (const sources::SourceDir& d : tree.dirs)
    if (!d.rel.empty() && files.count(d.rel)) note(d.rel);
  if (count == 0) return {};
  return fid::Error{EEXIST, fmt::format("{}: {} path{} of the source {} in the store already: {}{} ({})", store, count,
                                        count == 1 ? "" : "s", count == 1 ? "is" : "are", fmt::join(clash, ", "),
                                        count > clash.size() ? ", ..." : "",
                                        replace ? "--replace replaces a file with a file, outside clip folders"
                                                : "an append adds new paths only; --replace replaces the store's files")};
}

size_t replaced_files(const AppendTree& old, const AppendTree& part) {
  const std::unordered_set<std::string> files(old.files.begin(), old.files.end());
  return static_cast<size_t>(std::count_if(part.files.begin(), part.files.end(),
                                           [&](const std::string& rel) { return files.count(rel) > 0; }));
}

fid::Status take_store_options(PackOptions& opt, const GivenStoreOptions& given, const fsys::path& index_dir,
                               const std::string& store) {
  fid::Result<std::unique_ptr<index::SqliteDb>> db = open_append_index(index_dir);
  if (!db) return std::move(db).error();
  fid::Result<std::map<std::string, std::string>> meta = read_meta(**db);
  if (!meta) return std::move(meta).error();
  auto value = [&](const char* key, const char* absent) {
    auto it = meta->find(key);
    return it == meta->end() ? std::string(absent) : it->second;
  };
  if (value("shard", "0/1") != "0/1")
    return fid::Error{EINVAL, fmt::format("{}: a part of a sharded pack (shard {}): merge the parts, then append to "
                                          "the merged store", store, value("shard", ""))};
  for (const auto& [key, given_value] : given) {
    const std::string has = value(key.c_str(), key == "layout" ? "scan" : key == "level_scripts" ? "pcr" : "");
    if (has != given_value)
      return fid::Error{EINVAL, fmt::format("{}: the store has {} {}, not {}: an append takes the store's", store,
                                            key, has, given_value)};
  }
  opt.levels = value("level_scripts", "pcr") == "fast" ? codec::LevelScripts::fast : codec::LevelScripts::pcr;
  if (!index::parse_layout(value("layout", "scan"), opt.layout))
    return fid::Error{EINVAL, fmt::format("{}: corrupt meta: layout {}", store, value("layout", ""))};
  const std::optional<uint64_t> record_bytes = parse_u64(value("record_bytes", "")), seed = parse_u64(value("seed", ""));
  if (!record_bytes || !seed)
    return fid::Error{EINVAL, fmt::format("{}: corrupt meta: record_bytes '{}', seed '{}'", store,
                                          value("record_bytes", ""), value("seed", ""))};
  opt.record_bytes = *record_bytes;
  opt.seed = *seed;
  return {};
}

fid::Result<std::unordered_set<std::string>> record_paths(const index::SqliteDb& db) {
  std::unordered_set<std::string> out;
  fid::Result<index::SqliteStatement> q = db.prepare("SELECT path FROM records");
  if (!q) return std::move(q).error();
  fid::Status read = q->each_row([&]() -> fid::Status {
    out.insert(q->text(0));
    return {};
  });
  if (!read) return std::move(read).error();
  return out;
}

fid::Status write_union_index(const index::SqliteDb& old_db, const AppendTree& old, const index::SqliteDb& part_db,
                              const AppendTree& part, const PartRecordPath& part_record_path, const fsys::path& to) {
  return UnionWriter(old_db, old, part_db, part, part_record_path).write(to);
}

}  // namespace fid::pack
