#include "pack/index_writer.h"

#include <chrono>
#include <fmt/format.h>
#include <string>

namespace fid::pack {

namespace {

// SQLite failures are StoreError inside index/; the writer's callers get an Error.
fid::Error index_error(const index::StoreError& e) {
  return fid::Error{EIO, fmt::format("cannot write the index: {}", e.what())};
}

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

void write_meta(index::SqliteDb& db, const PackMeta& meta) {
  auto st = db.prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
  auto put = [&](std::string_view k, const std::string& v) {
    st.bind(1, k);
    st.bind(2, std::string_view(v));
    st.run();
  };
  put("format_version",
      std::to_string(meta.layout == index::StoreLayout::file ? index::kFormatVersion : index::kScanLayoutFormatVersion));
  put("layout", std::string(layout_name(meta.layout)));
  put("levels", std::to_string(codec::kJpegLevels));
  put("seed", std::to_string(meta.seed));
  put("record_bytes", std::to_string(meta.record_bytes));
  put("shard", meta.shard);
  put("source_digest", meta.source_digest);
  put("level_scripts", meta.level_scripts);
  put("created_unix", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                         std::chrono::system_clock::now().time_since_epoch()).count()));
}

void write_dirs(index::SqliteDb& db, const SourceTree& tree) {
  auto st = db.prepare("INSERT INTO dirs(id, parent, name, mtime_ns) VALUES (?1, ?2, ?3, ?4)");
  for (size_t i = 0; i < tree.dirs.size(); ++i) {
    const SourceDir& d = tree.dirs[i];
    st.bind(1, static_cast<int64_t>(i));
    st.bind(2, static_cast<int64_t>(d.parent));
    st.bind_blob(3, bytes_of(d.name));
    st.bind(4, d.mtime_ns);
    st.run();
  }
}

void write_records(index::SqliteDb& db, const std::vector<RecordInfo>& records) {
  auto st = db.prepare(
      "INSERT INTO records(id, path, layout, size, region_ends, header_id) VALUES (?1, ?2, ?3, ?4, ?5, ?1)");
  for (size_t i = 0; i < records.size(); ++i) {
    const RecordInfo& r = records[i];
    st.bind(1, static_cast<int64_t>(i));
    st.bind(2, std::string_view(r.path));
    st.bind(3, static_cast<int64_t>(r.layout));
    st.bind(4, static_cast<int64_t>(r.size));
    st.bind_blob(5, index::encode_u64s(r.region_ends));
    st.run();
  }
}

void write_skipped(index::SqliteDb& db, const SourceTree& tree) {
  auto st = db.prepare("INSERT INTO skipped(path, reason) VALUES (?1, ?2)");
  for (auto& [p, why] : tree.skipped) {
    st.bind_blob(1, bytes_of(p));
    st.bind(2, std::string_view(why));
    st.run();
  }
}

}  // namespace

IndexWriter::IndexWriter(const std::filesystem::path& scratch) : scratch_(scratch.string(), /*writable=*/true) {
  // A small page cache: the table is written in random order, its pages stay in the kernel's.
  scratch_.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384;");
  scratch_.exec(
      "CREATE TABLE rows(src INTEGER PRIMARY KEY, kind INTEGER NOT NULL, script INTEGER NOT NULL, "
      "record INTEGER NOT NULL, slot INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL, "
      "source_size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, pieces BLOB NOT NULL, note TEXT NOT NULL)");
  scratch_.exec("BEGIN");
  insert_.emplace(scratch_, "INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
}

fid::Result<std::unique_ptr<IndexWriter>> IndexWriter::create(const std::filesystem::path& scratch) {
  try {
    return std::unique_ptr<IndexWriter>(new IndexWriter(scratch));
  } catch (const index::StoreError& e) {
    return index_error(e);
  }
}

fid::Status IndexWriter::add(const StoredFile& f) {
  try {
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
    st.run();
    return {};
  } catch (const index::StoreError& e) {
    return index_error(e);
  }
}

// Files in source order (ids follow the sorted listing), skipped ones dropped.
void IndexWriter::write_files(index::SqliteDb& db, const SourceTree& tree) {
  auto st = db.prepare(
      "INSERT INTO files(id, dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, "
      "pieces, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
  auto rows = scratch_.prepare(
      "SELECT src, kind, script, record, slot, width, height, source_size, mtime_ns, pieces, note "
      "FROM rows ORDER BY src");
  for (int64_t id = 0; rows.step(); ++id) {
    const auto src = static_cast<uint32_t>(rows.integer(0));
    st.bind(1, id);
    st.bind(2, static_cast<int64_t>(tree.files.dir(src)));
    st.bind_blob(3, bytes_of(tree.files.name(src)));
    for (int c = 1; c <= 8; ++c) st.bind(c + 3, rows.integer(c));  // kind .. mtime_ns
    st.bind_blob(12, rows.blob(9));
    const std::string note = rows.text(10);
    st.bind(13, std::string_view(note));
    st.run();
  }
}

fid::Status IndexWriter::finish(const std::filesystem::path& path, const PackMeta& meta, const SourceTree& tree,
                                const std::vector<RecordInfo>& records) {
  try {
    insert_.reset();
    scratch_.exec("COMMIT");
    index::SqliteDb db(path.string(), /*writable=*/true);
    db.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;");
    db.exec(index::kSchema);
    db.exec("BEGIN");
    write_meta(db, meta);
    write_dirs(db, tree);
    write_records(db, records);
    write_files(db, tree);
    write_skipped(db, tree);
    db.exec("COMMIT");
    return {};
  } catch (const index::StoreError& e) {
    return index_error(e);
  }
}

}  // namespace fid::pack
