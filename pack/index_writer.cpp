#include "pack/index_writer.h"

#include <chrono>
#include <fmt/format.h>
#include <string>

namespace fid::pack {

namespace {

// The writer's callers get EIO "cannot write the index: <SQLite's words>".
fid::Error index_error(const fid::Error& e) {
  return fid::Error{EIO, fmt::format("cannot write the index: {}", e.message)};
}

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

fid::Status write_meta(index::SqliteDb& db, const PackMeta& meta) {
  fid::Result<index::SqliteStatement> st = db.prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  auto put = [&](std::string_view k, const std::string& v) {
    st->bind(1, k);
    st->bind(2, std::string_view(v));
    return st->run();
  };
  const std::pair<std::string_view, std::string> rows[] = {
      {"format_version", std::to_string(meta.streams ? index::kVideoStreamsFormatVersion
                                        : meta.clips ? index::kClipsFormatVersion
                                        : meta.layout == index::StoreLayout::file ? index::kFileLayoutFormatVersion
                                                                                   : index::kScanLayoutFormatVersion)},
      {"layout", std::string(layout_name(meta.layout))},
      {"levels", std::to_string(codec::kJpegLevels)},
      {"seed", std::to_string(meta.seed)},
      {"record_bytes", std::to_string(meta.record_bytes)},
      {"shard", meta.shard},
      {"source_digest", meta.source_digest},
      {"level_scripts", meta.level_scripts},
      {"created_unix", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch()).count())},
  };
  for (const auto& [k, v] : rows)
    if (fid::Status put_one = put(k, v); !put_one) return put_one;
  return {};
}

fid::Status write_dirs(index::SqliteDb& db, const sources::SourceTree& tree) {
  fid::Result<index::SqliteStatement> st = db.prepare("INSERT INTO dirs(id, parent, name, mtime_ns) VALUES (?1, ?2, ?3, ?4)");
  if (!st) return std::move(st).error();
  for (size_t i = 0; i < tree.dirs.size(); ++i) {
    const sources::SourceDir& d = tree.dirs[i];
    st->bind(1, static_cast<int64_t>(i));
    st->bind(2, static_cast<int64_t>(d.parent));
    st->bind_blob(3, bytes_of(d.name));
    st->bind(4, d.mtime_ns);
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

fid::Status write_records(index::SqliteDb& db, const std::vector<RecordInfo>& records) {
  fid::Result<index::SqliteStatement> st = db.prepare(
      "INSERT INTO records(id, path, layout, size, region_ends, header_id) VALUES (?1, ?2, ?3, ?4, ?5, ?1)");
  if (!st) return std::move(st).error();
  for (size_t i = 0; i < records.size(); ++i) {
    const RecordInfo& r = records[i];
    st->bind(1, static_cast<int64_t>(i));
    st->bind(2, std::string_view(r.path));
    st->bind(3, static_cast<int64_t>(r.layout));
    st->bind(4, static_cast<int64_t>(r.size));
    st->bind_blob(5, index::encode_u64s(r.region_ends));
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

// The clips table: the records' runs of clip frames, numbered in record and slot order.
fid::Status write_clips(index::SqliteDb& db, const std::vector<RecordInfo>& records) {
  fid::Result<index::SqliteStatement> st =
      db.prepare("INSERT INTO clips(id, dir, record, first_slot, frames) VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!st) return std::move(st).error();
  int64_t id = 0;
  for (size_t r = 0; r < records.size(); ++r)
    for (const ClipRow& c : records[r].clips) {
      st->bind(1, id++);
      st->bind(2, static_cast<int64_t>(c.dir));
      st->bind(3, static_cast<int64_t>(r));
      st->bind(4, static_cast<int64_t>(c.first_slot));
      st->bind(5, static_cast<int64_t>(c.frames));
      if (fid::Status ran = st->run(); !ran) return ran;
    }
  return {};
}

fid::Status write_skipped(index::SqliteDb& db, const sources::SourceTree& tree) {
  fid::Result<index::SqliteStatement> st = db.prepare("INSERT INTO skipped(path, reason) VALUES (?1, ?2)");
  if (!st) return std::move(st).error();
  for (auto& [p, why] : tree.skipped) {
    st->bind_blob(1, bytes_of(p));
    st->bind(2, std::string_view(why));
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

}  // namespace

fid::Result<std::unique_ptr<IndexWriter>> IndexWriter::create(const std::filesystem::path& scratch) {
  std::unique_ptr<IndexWriter> w(new IndexWriter());
  fid::Result<std::unique_ptr<index::SqliteDb>> db = index::SqliteDb::open(scratch.string(), /*writable=*/true);
  if (!db) return index_error(db.error());
  w->scratch_ = std::move(db).value();
  // A small page cache: the table is written in random order, its pages stay in the kernel's.
  for (const char* sql :
       {"PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384;",
        "CREATE TABLE rows(src INTEGER PRIMARY KEY, kind INTEGER NOT NULL, script INTEGER NOT NULL, "
        "record INTEGER NOT NULL, slot INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL, "
        "source_size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, pieces BLOB NOT NULL, note TEXT NOT NULL)",
        "BEGIN"})
    if (fid::Status done = w->scratch_->exec(sql); !done) return index_error(done.error());
  fid::Result<index::SqliteStatement> insert =
      w->scratch_->prepare("INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  if (!insert) return index_error(insert.error());
  w->insert_.emplace(std::move(insert).value());
  return w;
}

fid::Status IndexWriter::add(const StoredFile& f) {
  index::SqliteStatement& st = *insert_;
  st.bind(1, static_cast<int64_t>(f.source_index));
  st.bind(2, static_cast<int64_t>(f.kind));
  st.bind(3, static_cast<int64_t>(f.script));
  st.bind(4, static_cast<int64_t>(f.record));
  st.bind(5, static_cast<int64_t>(f.slot));
  st.bind(6, static_cast<int64_t>(f.width));
  st.bind(7, static_cast<int64_t>(f.height));
  st.bind(8, static_cast<int64_t>(f.source_size));
  st.bind(9, f.mtime_ns);
  st.bind_blob(10, index::encode_pieces(f.pieces));
  st.bind(11, std::string_view(f.note));
  if (fid::Status ran = st.run(); !ran) return index_error(ran.error());
  return {};
}

// Files in source order (ids follow the sorted listing), skipped ones dropped.
fid::Status IndexWriter::write_files(index::SqliteDb& db, const sources::SourceTree& tree) {
  fid::Result<index::SqliteStatement> st = db.prepare(
      "INSERT INTO files(id, dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, "
      "pieces, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  if (!st) return std::move(st).error();
  fid::Result<index::SqliteStatement> rows = scratch_->prepare(
      "SELECT src, kind, script, record, slot, width, height, source_size, mtime_ns, pieces, note "
      "FROM rows ORDER BY src");
  if (!rows) return std::move(rows).error();
  files_in_dir_.assign(tree.dirs.size(), 0);
  for (int64_t id = 0;; ++id) {
    fid::Result<bool> row = rows->step();
    if (!row) return std::move(row).error();
    if (!*row) return {};
    const auto src = static_cast<uint32_t>(rows->integer(0));
    st->bind(1, id);
    st->bind(2, static_cast<int64_t>(tree.files.dir(src)));
    files_in_dir_[tree.files.dir(src)]++;
    st->bind_blob(3, bytes_of(tree.files.name(src)));
    for (int c = 1; c <= 8; ++c) st->bind(c + 3, rows->integer(c));  // kind .. mtime_ns
    st->bind_blob(12, rows->blob(9));
    const std::string note = rows->text(10);
    st->bind(13, std::string_view(note));
    if (fid::Status ran = st->run(); !ran) return ran;
  }
}

fid::Status IndexWriter::write_videos(index::SqliteDb& db, const sources::SourceTree& tree) {
  if (tree.videos.empty()) return {};
  if (fid::Status made = db.exec(index::kVideosSchema); !made) return made;
  fid::Result<index::SqliteStatement> st = db.prepare(
      "INSERT INTO videos(dir, name, source_size, codec, fps_num, fps_den, width, height, frames) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (!st) return std::move(st).error();
  for (const index::VideoSource& v : tree.videos) {
    if (files_in_dir_[v.dir] == 0) continue;  // in another shard
    st->bind(1, static_cast<int64_t>(v.dir));
    st->bind_blob(2, bytes_of(v.name));
    st->bind(3, static_cast<int64_t>(v.source_size));
    st->bind(4, std::string_view(v.codec));
    const int64_t values[] = {v.fps_num, v.fps_den, v.width, v.height, files_in_dir_[v.dir]};
    for (int c = 0; c < 5; ++c) st->bind(5 + c, values[c]);
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

fid::Status IndexWriter::write_video_streams(index::SqliteDb& db, const sources::SourceTree& tree) {
  if (fid::Status made = db.exec(index::kVideoStreamsSchema); !made) return made;
  fid::Result<index::SqliteStatement> st = db.prepare(
      "INSERT INTO video_streams(dir, codec, extradata, width, height, gop, stored_bytes) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!st) return std::move(st).error();
  for (const index::VideoSource& v : tree.videos) {
    if (files_in_dir_[v.dir] == 0 || !v.is_stream()) continue;
    st->bind(1, static_cast<int64_t>(v.dir));
    st->bind(2, std::string_view(v.stream.codec));
    st->bind_blob(3, v.stream.extradata);
    const int64_t values[] = {v.stream.width, v.stream.height, v.stream.gop, static_cast<int64_t>(v.stream.stored_bytes)};
    for (int c = 0; c < 4; ++c) st->bind(4 + c, values[c]);
    if (fid::Status ran = st->run(); !ran) return ran;
  }
  return {};
}

fid::Status IndexWriter::finish(const std::filesystem::path& path, const PackMeta& meta, const sources::SourceTree& tree,
                                const std::vector<RecordInfo>& records) {
  insert_.reset();
  if (fid::Status committed = scratch_->exec("COMMIT"); !committed) return index_error(committed.error());
  fid::Result<std::unique_ptr<index::SqliteDb>> opened = index::SqliteDb::open(path.string(), /*writable=*/true);
  if (!opened) return index_error(opened.error());
  index::SqliteDb& db = **opened;
  fid::Status written = db.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;");
  if (written) written = db.exec(index::kSchema);
  // Format 7 is a format 6 store (its clips and unreferenced tables, maybe empty) with streams.
  if (written && (meta.clips || meta.streams)) written = db.exec(index::kClipsSchema);
  if (written && meta.streams) written = db.exec(index::kUnreferencedSchema);
  if (written) written = db.exec("BEGIN");
  if (written) written = write_meta(db, meta);
  if (written) written = write_dirs(db, tree);
  if (written) written = write_records(db, records);
  if (written) written = write_files(db, tree);
  if (written && meta.clips) written = write_clips(db, records);
  if (written) written = write_videos(db, tree);
  if (written && meta.streams) written = write_video_streams(db, tree);
  if (written) written = write_skipped(db, tree);
  if (written) written = db.exec("COMMIT");
  if (!written) return index_error(written.error());
  return {};
}

}  // namespace fid::pack
