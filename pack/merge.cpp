#include "pack/merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <memory>
#include <queue>
#include <string>

#include "common/numbers.h"
#include "index/format.h"
#include "pack/shard.h"
#include "index/sqlite_db.h"
#include "pack/temp_store.h"
#include "sources/pack_source.h"

namespace fid::pack {

namespace fsys = std::filesystem;

namespace {

// Meta keys that the parts of one pack share; a difference means they are not parts of one pack.
// (format_version is compared without the clips' bump: a part that found no clips is format 3 or
// 4, one that did 5: check_parts compares it among the parts without clips.)
constexpr const char* kSharedKeys[] = {"source_digest", "seed", "levels", "level_scripts", "record_bytes"};

struct Part {
  fsys::path dir;
  std::string name;          // for messages: the folder, or the part's URL
  size_t given = 0;          // its place among the parts as given
  std::unique_ptr<index::SqliteDb> db;
  std::map<std::string, std::string> meta;
  Shard shard;
  uint32_t records = 0;      // records of this part
  uint32_t record_base = 0;  // the merged id of its record 0
  bool clips = false;        // it has a clips table (format 5)
};

const std::string& name_of(const Part& p) { return p.name; }

std::string as_string(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

fid::Error not_a_part(const std::string& name, const std::string& why) {
  return fid::Error{EINVAL, fmt::format("{}: not a part of a sharded pack: {}", name, why)};
}

// Opens a part's index and reads its meta; refuses what is not a store, or a store without the
// keys every pack writes now (shard, source_digest, level_scripts).
fid::Result<Part> open_part(const fsys::path& dir, const std::string& name) {
  Part p;
  p.dir = dir;
  p.name = name;
  std::error_code ec;
  if (!fsys::is_regular_file(dir / index::kIndexFile, ec))
    return fid::Error{ENOENT, fmt::format("{}: not a fidelityfs store (no {})", name, index::kIndexFile)};
  auto not_a_store = [&](const fid::Error& e) {
    return fid::Error{EINVAL, fmt::format("{}: not a fidelityfs store: {}", name, e.message)};
  };
  fid::Result<std::unique_ptr<index::SqliteDb>> db = index::SqliteDb::open((dir / index::kIndexFile).string(), /*writable=*/false);
  if (!db) return not_a_store(db.error());
  p.db = std::move(db).value();
  fid::Result<index::SqliteStatement> q = p.db->prepare("SELECT key, value FROM meta");
  if (!q) return not_a_store(q.error());
  if (fid::Status read = q->each_row([&]() -> fid::Status {
        p.meta[q->text(0)] = q->text(1);
        return {};
      });
      !read)
    return not_a_store(read.error());
  for (const char* key : {"format_version", "levels", "seed", "record_bytes"})
    if (!p.meta.count(key)) return fid::Error{EINVAL, fmt::format("{}: not a fidelityfs store (no {})", name, key)};
  const std::optional<uint64_t> version = parse_u64(p.meta["format_version"]);
  if (!version) return fid::Error{EINVAL, fmt::format("{}: corrupt meta: format_version '{}'", name, p.meta["format_version"])};
  if (*version > static_cast<uint64_t>(index::kFormatVersion))
    return fid::Error{EINVAL, fmt::format("{}: store format version {} is newer than this fidelityfs supports ({})",
                                          name, p.meta["format_version"], index::kFormatVersion)};
  p.clips = *version >= static_cast<uint64_t>(index::kClipsFormatVersion);
  if (*version >= static_cast<uint64_t>(index::kVideoStreamsFormatVersion))
    return not_a_part(name, "a store with videos kept as streams (format 7): pack the whole source instead");
  if (*version >= static_cast<uint64_t>(index::kUnreferencedFormatVersion))
    return not_a_part(name, "a store whose files an append replaced (format 6); relayout it first");
  for (const char* key : {"shard", "source_digest", "level_scripts"})
    if (!p.meta.count(key)) return not_a_part(name, fmt::format("no {} in its meta (packed by an older fidelityfs)", key));
  p.meta.try_emplace("layout", "scan");  // stores of format 3 and older
  fid::Result<Shard> shard = parse_shard(p.meta["shard"]);
  if (!shard) return not_a_part(name, fmt::format("corrupt meta: shard '{}'", p.meta["shard"]));
  p.shard = *shard;
  return p;
}

// The parts must be every shard of one pack, once each; sorts them by shard number.
fid::Status check_parts(std::vector<Part>& parts) {
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.shard.index < b.shard.index; });
  const Part& first = parts[0];
  for (const Part& p : parts) {
    if (p.meta.at("layout") != first.meta.at("layout"))
      return fid::Error{EINVAL, fmt::format("{} and {}: parts of different layouts ({} and {}); make one layout of "
                                            "both with fidelityfs relayout first", name_of(first), name_of(p),
                                            first.meta.at("layout"), p.meta.at("layout"))};
    for (const char* key : kSharedKeys) {
      const std::string &a = first.meta.at(key), &b = p.meta.at(key);
      if (a != b)
        return fid::Error{EINVAL, fmt::format("{} and {}: not parts of one {}: {} {} and {}", name_of(first), name_of(p),
                                              std::string(key) == "source_digest" ? "source" : "pack", key, a, b)};
    }
    if (!p.clips && !first.clips && p.meta.at("format_version") != first.meta.at("format_version"))
      return fid::Error{EINVAL, fmt::format("{} and {}: not parts of one pack: format_version {} and {}", name_of(first),
                                            name_of(p), first.meta.at("format_version"), p.meta.at("format_version"))};
    if (p.shard.count != first.shard.count)
      return fid::Error{EINVAL, fmt::format("{} and {}: not parts of one pack: shard {} and shard {}", name_of(first),
                                            name_of(p), shard_text(first.shard), shard_text(p.shard))};
  }
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].shard.index == parts[i - 1].shard.index)
      return fid::Error{EINVAL, fmt::format("{} and {}: both are shard {}", name_of(parts[i - 1]), name_of(parts[i]),
                                            shard_text(parts[i].shard))};
  if (parts.size() == first.shard.count) return {};
  std::vector<uint32_t> missing;
  size_t k = 0;
  for (uint32_t i = 0; i < first.shard.count; ++i) {
    if (k < parts.size() && parts[k].shard.index == i) ++k;
    else missing.push_back(i);
  }
  std::vector<std::string> names;
  for (const Part& p : parts) names.push_back(name_of(p));
  return fid::Error{EINVAL, fmt::format("shard{} {} of {} missing: the parts given are {}", missing.size() > 1 ? "s" : "",
                                        fmt::join(missing, ", "), first.shard.count, fmt::join(names, ", "))};
}

// The folders' relative paths, by id; every part must have the same folders (ids, parents, names).
fid::Result<std::vector<std::string>> folder_paths(std::vector<Part>& parts) {
  std::vector<index::SqliteStatement> qs;
  for (Part& p : parts) {
    fid::Result<index::SqliteStatement> q = p.db->prepare("SELECT id, parent, name FROM dirs ORDER BY id");
    if (!q) return std::move(q).error();
    qs.push_back(std::move(q).value());
  }
  std::vector<std::string> rel;
  for (;;) {
    fid::Result<bool> first = qs[0].step();
    if (!first) return std::move(first).error();
    const bool more = *first;
    for (size_t i = 1; i < qs.size(); ++i) {
      fid::Result<bool> row = qs[i].step();
      if (!row) return std::move(row).error();
      const bool m = *row;
      if (m != more || (more && (qs[i].integer(0) != qs[0].integer(0) || qs[i].integer(1) != qs[0].integer(1) ||
                                 as_string(qs[i].blob(2)) != as_string(qs[0].blob(2)))))
        return fid::Error{EINVAL, fmt::format("{} and {}: not parts of one source: their folders differ (folder {})",
                                              name_of(parts[0]), name_of(parts[i]), rel.size())};
    }
    if (!more) return rel;
    const int64_t id = qs[0].integer(0), parent = qs[0].integer(1);
    if (id != static_cast<int64_t>(rel.size()) || parent < 0 || (id > 0 && parent >= id))
      return fid::Error{EINVAL, fmt::format("{}: corrupt index: folder {}", name_of(parts[0]), id)};
    const std::string name = as_string(qs[0].blob(2));
    const std::string& up = rel.empty() ? name : rel[static_cast<size_t>(parent)];
    rel.push_back(id == 0 ? std::string() : up.empty() ? name : up + "/" + name);
  }
}

// Writes the merged index (into a TempStore folder) from the checked parts.
class MergeWriter {
 public:
  MergeWriter(std::vector<Part>& parts, const fsys::path& tmp, const MergeIo& io, const std::atomic<bool>& cancel)
      : parts_(parts), tmp_(tmp), io_(io), cancel_(cancel) {}

  // Creates the merged index (schema, a transaction begun).
  fid::Status begin();
  fid::Status write_meta();
  fid::Status copy_dirs();
  fid::Status link_records();
  fid::Status merge_files(const std::vector<std::string>& folders);
  fid::Status copy_skipped();
  // The parts' clips tables, in part order, renumbered, their records moved: a part's records
  // follow the part before's, so the rows stay in record and slot order.
  fid::Status copy_clips();
  // The parts' videos tables: a folder's row from the part that holds its frames (a clip is in
  // one shard; were a folder's frames in several, their counts add up).
  fid::Status copy_videos();
  // Inserts the files row at `q` (a part's) with `insert` as file `id`, its record moved by `record_base`.
  static fid::Status copy_file(const index::SqliteStatement& q, int64_t id, uint32_t record_base,
                               index::SqliteStatement& insert);
  fid::Status finish() { return db_->exec("COMMIT"); }

  MergeReport report;

 private:
  std::vector<Part>& parts_;
  // Puts one record into the store under its merged path.
  fid::Status place(const Part& p, const std::string& from, const std::string& to);

  const fsys::path& tmp_;
  const MergeIo& io_;
  const std::atomic<bool>& cancel_;
  std::unique_ptr<index::SqliteDb> db_;
};

fid::Status MergeWriter::begin() {
  fid::Result<std::unique_ptr<index::SqliteDb>> db = index::SqliteDb::open((tmp_ / index::kIndexPartialFile).string(), /*writable=*/true);
  if (!db) return std::move(db).error();
  db_ = std::move(db).value();
  fid::Status s = db_->exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;");
  if (s) s = db_->exec(index::kSchema);
  if (s) s = db_->exec("BEGIN");
  return s;
}

fid::Status MergeWriter::write_meta() {
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  const bool clips = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.clips; });
  for (auto [key, value] : parts_[0].meta) {
    if (key == "shard") value = shard_text(Shard{});
    if (key == "format_version" && clips) value = std::to_string(index::kClipsFormatVersion);
    if (key == "created_unix")
      value = std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    st->bind(1, std::string_view(key));
    st->bind(2, std::string_view(value));
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

fid::Status MergeWriter::copy_dirs() {
  fid::Result<index::SqliteStatement> q = parts_[0].db->prepare("SELECT id, parent, name, mtime_ns FROM dirs ORDER BY id");
  if (!q) return std::move(q).error();
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO dirs(id, parent, name, mtime_ns) VALUES (?1, ?2, ?3, ?4)");
  if (!st) return std::move(st).error();
  return q->each_row([&]() -> fid::Status {
    st->bind(1, q->integer(0));
    st->bind(2, q->integer(1));
    st->bind_blob(3, q->blob(2));
    st->bind(4, q->integer(3));
    if (fid::Status ran = st->run(); !ran) return ran;
    report.dirs++;
    return {};
  });
}

fid::Status MergeWriter::place(const Part& p, const std::string& from_rel, const std::string& to) {
  if (io_.place_record) return io_.place_record(p.given, from_rel, to);
  const fsys::path from = p.dir / from_rel;
  if (::link(from.c_str(), (tmp_ / to).c_str()) == 0) return {};
  const int err = errno;
  if (err == EXDEV)
    return fid::Error{EXDEV, fmt::format("{}: cannot link into the store: the parts and the store must be on one "
                                         "filesystem", from.string())};
  return fid::Error{err, fmt::format("{}: cannot link into the store: {}", from.string(), std::strerror(err))};
}

// Places every part's records into the store under their merged ids (part 0's first), keeping
// their header ids.
fid::Status MergeWriter::link_records() {
  fid::Result<index::SqliteStatement> st = db_->prepare(
      "INSERT INTO records(id, path, layout, size, region_ends, header_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!st) return std::move(st).error();
  uint32_t next = 0;
  for (Part& p : parts_) {
    p.record_base = next;
    fid::Result<index::SqliteStatement> q =
        p.db->prepare("SELECT id, path, layout, size, region_ends, header_id FROM records ORDER BY id");
    if (!q) return std::move(q).error();
    fid::Status linked = q->each_row([&]() -> fid::Status {
      const std::string path = q->text(1);
      if (q->integer(0) != p.records || path.empty() || path.front() == '/' || path.find("..") != std::string::npos)
        return fid::Error{EINVAL, fmt::format("{}: corrupt index: record {}", name_of(p), q->integer(0))};
      const std::string to = index::record_path(next);
      if (fid::Status placed = place(p, path, to); !placed) return placed;
      st->bind(1, static_cast<int64_t>(next));
      st->bind(2, std::string_view(to));
      for (int c = 2; c <= 3; ++c) st->bind(c + 1, q->integer(c));  // layout, size
      st->bind_blob(5, q->blob(4));
      st->bind(6, q->integer(5));
      if (fid::Status ran = st->run(); !ran) return ran;
      ++p.records;
      ++next;
      return {};
    });
    if (!linked) return linked;
    if (cancel_) return fid::Error{ECANCELED, "interrupted"};
  }
  report.records = next;
  return {};
}

fid::Status MergeWriter::copy_file(const index::SqliteStatement& q, int64_t id, uint32_t record_base,
                                   index::SqliteStatement& insert) {
  insert.bind(1, id);
  insert.bind(2, q.integer(0));
  insert.bind_blob(3, q.blob(1));
  for (int c = 2; c <= 9; ++c) insert.bind(c + 2, q.integer(c));  // kind .. mtime_ns
  insert.bind(6, q.integer(4) + record_base);
  insert.bind_blob(12, q.blob(10));
  const std::string note = q.text(11);
  insert.bind(13, std::string_view(note));
  return insert.run();
}

// The parts' files in walk order (each part's files are in it already: a k-way merge), renumbered
// from 0, their records moved to the merged ids.
fid::Status MergeWriter::merge_files(const std::vector<std::string>& folders) {
  struct Cursor {
    index::SqliteStatement q;
    std::string path;
  };
  std::vector<Cursor> cur;
  auto advance = [&](size_t i) -> fid::Result<bool> {
    Cursor& c = cur[i];
    fid::Result<bool> row = c.q.step();
    if (!row || !*row) return row;
    const int64_t dir = c.q.integer(0), record = c.q.integer(4);
    if (dir < 0 || static_cast<uint64_t>(dir) >= folders.size() || record < 0 || record >= parts_[i].records)
      return fid::Error{EINVAL, fmt::format("{}: corrupt index: a file's folder {} or record {}", name_of(parts_[i]),
                                            dir, record)};
    const std::string& up = folders[static_cast<size_t>(dir)];
    c.path = up.empty() ? as_string(c.q.blob(1)) : up + "/" + as_string(c.q.blob(1));
    return true;
  };
  auto later = [&](size_t a, size_t b) { return sources::walk_less(cur[b].path, cur[a].path); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
  for (Part& p : parts_) {
    fid::Result<index::SqliteStatement> q = p.db->prepare(
        "SELECT dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, pieces, note FROM files "
        "ORDER BY id");
    if (!q) return std::move(q).error();
    cur.push_back(Cursor{std::move(q).value(), {}});
  }
  for (size_t i = 0; i < cur.size(); ++i) {
    fid::Result<bool> more = advance(i);
    if (!more) return std::move(more).error();
    if (*more) heap.push(i);
  }
  fid::Result<index::SqliteStatement> st =
      db_->prepare("INSERT INTO files(id, dir, name, kind, script, record, slot, width, height, source_size, "
                   "mtime_ns, pieces, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  if (!st) return std::move(st).error();
  std::string last;
  size_t last_part = 0;
  for (int64_t id = 0; !heap.empty(); ++id) {
    const size_t i = heap.top();
    heap.pop();
    index::SqliteStatement& q = cur[i].q;
    if (id > 0 && cur[i].path == last)
      return fid::Error{EINVAL, fmt::format("{} and {}: both hold {}", name_of(parts_[last_part]), name_of(parts_[i]), last)};
    if (fid::Status copied = copy_file(q, id, parts_[i].record_base, *st); !copied) return copied;
    report.files++;
    last.swap(cur[i].path);
    last_part = i;
    if ((id & 0xFFFF) == 0 && cancel_) return fid::Error{ECANCELED, "interrupted"};
    fid::Result<bool> more = advance(i);
    if (!more) return std::move(more).error();
    if (*more) heap.push(i);
  }
  return {};
}

fid::Status MergeWriter::copy_skipped() {
  fid::Result<index::SqliteStatement> st = db_->prepare("INSERT INTO skipped(path, reason) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  for (Part& p : parts_) {
    fid::Result<index::SqliteStatement> q = p.db->prepare("SELECT path, reason FROM skipped");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      st->bind_blob(1, q->blob(0));
      const std::string reason = q->text(1);
      st->bind(2, std::string_view(reason));
      if (fid::Status ran = st->run(); !ran) return ran;
      report.skipped++;
      return {};
    });
    if (!copied) return copied;
  }
  return {};
}

fid::Status MergeWriter::copy_videos() {
  constexpr const char* kColumns = "dir, name, source_size, codec, fps_num, fps_den, width, height, frames";
  bool made = false;
  for (Part& p : parts_) {
    fid::Result<bool> found = p.db->has_table("videos");
    if (!found) return std::move(found).error();
    if (!*found) continue;
    if (!made) {
      if (fid::Status m = db_->exec(index::kVideosSchema); !m) return m;
      made = true;
    }
    fid::Result<index::SqliteStatement> q = p.db->prepare(fmt::format("SELECT {} FROM videos", kColumns).c_str());
    if (!q) return std::move(q).error();
    fid::Result<index::SqliteStatement> st = db_->prepare(
        fmt::format("INSERT INTO videos({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
                    "ON CONFLICT(dir) DO UPDATE SET frames = frames + excluded.frames", kColumns).c_str());
    if (!st) return std::move(st).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      for (int c = 0; c < 9; ++c)
        if (c == 1) st->bind_blob(2, q->blob(1));
        else if (c == 3) st->bind(4, std::string_view(q->text(3)));
        else st->bind(c + 1, q->integer(c));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

fid::Status MergeWriter::copy_clips() {
  if (std::none_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.clips; })) return {};
  if (fid::Status made = db_->exec(index::kClipsSchema); !made) return made;
  fid::Result<index::SqliteStatement> st =
      db_->prepare("INSERT INTO clips(id, dir, record, first_slot, frames) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!st) return std::move(st).error();
  int64_t id = 0;
  for (Part& p : parts_) {
    if (!p.clips) continue;
    fid::Result<index::SqliteStatement> q = p.db->prepare("SELECT dir, record, first_slot, frames FROM clips ORDER BY id");
    if (!q) return std::move(q).error();
    fid::Status copied = q->each_row([&]() -> fid::Status {
      const int64_t record = q->integer(1);
      if (record < 0 || record >= p.records)  // the rest is checked when the store loads
        return fid::Error{EINVAL, fmt::format("{}: corrupt index: clip of record {}", name_of(p), record)};
      st->bind(1, id++);
      st->bind(2, q->integer(0));
      st->bind(3, record + p.record_base);
      st->bind(4, q->integer(2));
      st->bind(5, q->integer(3));
      return st->run();
    });
    if (!copied) return copied;
  }
  return {};
}

// Writes the merged index into `tmp` (records linked, index complete and renamed into place).
fid::Result<MergeReport> write_store(std::vector<Part>& parts, TempStore& tmp, const fsys::path& store, const MergeIo& io,
                                     const std::atomic<bool>& cancel) {
  fid::Result<std::vector<std::string>> folders = folder_paths(parts);
  if (!folders) return std::move(folders).error();
  MergeReport report;
  {
    MergeWriter w(parts, tmp.path(), io, cancel);
    fid::Status written = w.begin();
    if (written) written = w.write_meta();
    if (written) written = w.copy_dirs();
    if (written) written = w.link_records();
    if (written) written = w.merge_files(*folders);
    if (written) written = w.copy_skipped();
    if (written) written = w.copy_clips();
    if (written) written = w.copy_videos();
    if (written) written = w.finish();
    if (!written) return std::move(written).error();
    report = w.report;
  }
  if (fid::Status published = tmp.publish_index(store.string(), "merge"); !published) return std::move(published).error();
  return report;
}

}  // namespace

namespace {

// Opens the parts and checks that they fit together (sorted by shard number).
fid::Result<std::vector<Part>> open_parts(const std::vector<fsys::path>& part_dirs, const MergeIo& io) {
  if (part_dirs.empty()) return fid::Error{EINVAL, "no part given"};
  std::vector<Part> parts;
  for (size_t i = 0; i < part_dirs.size(); ++i) {
    fid::Result<Part> part = open_part(part_dirs[i], io.part_names.empty() ? part_dirs[i].string() : io.part_names.at(i));
    if (!part) return std::move(part).error();
    part->given = i;
    parts.push_back(std::move(part).value());
  }
  if (fid::Status ok = check_parts(parts); !ok) return std::move(ok).error();
  return parts;
}

}  // namespace

fid::Status check_merge_parts(const std::vector<fsys::path>& part_dirs, const MergeIo& io) {
  fid::Result<std::vector<Part>> opened = open_parts(part_dirs, io);
  if (!opened) return std::move(opened).error();
  return {};
}

fid::Result<MergeReport> merge(const std::vector<fsys::path>& part_dirs, const fsys::path& target,
                               const std::atomic<bool>& cancel, const MergeIo& io) {
  const auto t0 = std::chrono::steady_clock::now();
  fid::Result<fsys::path> checked = check_store_target(target);
  if (!checked) return std::move(checked).error();
  const fsys::path store = std::move(checked).value();
  fid::Result<std::vector<Part>> opened = open_parts(part_dirs, io);
  if (!opened) return std::move(opened).error();
  std::vector<Part>& parts = *opened;
  fid::Result<std::unique_ptr<TempStore>> tmp = TempStore::begin(store);
  if (!tmp) return std::move(tmp).error();
  fid::Result<MergeReport> report = write_store(parts, **tmp, store, io, cancel);
  if (!report) return report;
  if (cancel) return fid::Error{ECANCELED, "interrupted"};
  if (io.destination) {
    if (fid::Status uploaded = io.destination->finish((*tmp)->path() / index::kIndexFile); !uploaded)
      return std::move(uploaded).error();
  } else if (fid::Status committed = (*tmp)->commit(store); !committed) {
    return std::move(committed).error();
  }
  report->parts = static_cast<uint32_t>(parts.size());
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace fid::pack
