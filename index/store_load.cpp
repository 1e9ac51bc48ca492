// Store's loader: index.sqlite read into the tables and checked (or the tables file mapped),
// at Store::open and Store::open_index. A failure inside is a StoreError, which never leaves this
// file: the two opens return it as an Error.
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include "codec/l3_view.h"
#include "common/ascii.h"
#include "common/numbers.h"
#include "index/format.h"
#include "index/sqlite_db.h"
#include "index/store.h"
#include "index/store_load_errors.h"
#include "index/tables_file.h"

namespace fid::index {

namespace {

std::optional<std::string> meta_optional(SqliteDb& db, const char* key) {
  SqliteStatement st = must(db.prepare("SELECT value FROM meta WHERE key = ?1"));
  st.bind(1, std::string_view(key));
  if (!must(st.step())) return std::nullopt;
  return st.text(0);
}

std::string meta_value(SqliteDb& db, const char* key) {
  std::optional<std::string> v = meta_optional(db, key);
  if (!v) throw StoreError(fmt::format("{}: corrupt index: meta key '{}' missing", db.path(), key));
  return std::move(*v);
}

uint64_t meta_u64(SqliteDb& db, const char* key) {
  const std::string v = meta_value(db, key);
  const std::optional<uint64_t> n = parse_u64(v);
  if (!n) throw StoreError(fmt::format("{}: corrupt index: meta '{}' is not a number from 0 to 2^64 - 1: '{}'", db.path(), key, v));
  return *n;
}

int64_t meta_int(SqliteDb& db, const char* key) {
  std::string v = meta_value(db, key);
  try {
    size_t used = 0;
    long long n = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return n;
  } catch (const std::exception&) {
    throw StoreError(fmt::format("{}: corrupt index: meta '{}' is not a number: '{}'", db.path(), key, v));
  }
}

}  // namespace

Store::Store() = default;
Store::~Store() = default;  // here, where MappedTables is complete

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& dir, const std::filesystem::path& tables_dir) {
  try {
    return load(dir, tables_dir);
  } catch (const StoreError& e) {
    return Error{EINVAL, e.what()};
  } catch (const std::bad_alloc&) {
    return Error{ENOMEM, dir.string() + ": out of memory loading the index"};
  }
}

Result<std::unique_ptr<Store>> Store::open_index(const std::filesystem::path& index_file, const std::string& location,
                                                 const std::filesystem::path& tables_dir) {
  try {
    std::unique_ptr<Store> s(new Store());
    s->location_ = location;
    s->load_tables(index_file, location + "/" + std::string(kIndexFile), tables_dir);
    return s;
  } catch (const StoreError& e) {
    return Error{EINVAL, e.what()};
  } catch (const std::bad_alloc&) {
    return Error{ENOMEM, location + ": out of memory loading the index"};
  }
}

std::optional<std::string> unfinished_store_beside(const std::filesystem::path& dir) {
  const std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  std::error_code ec;
  auto at = std::filesystem::absolute(dir, ec).lexically_normal();
  if (at.filename().empty()) at = at.parent_path();
  for (const auto& e : std::filesystem::directory_iterator(at.parent_path(), ec))
    if (!name.empty() && e.path().filename().string().rfind("." + name + ".tmp-", 0) == 0)
      return fmt::format("a pack or relayout of it did not complete or is still running ({}); run fidelityfs pack "
                         "again (or relayout) once none runs", e.path().string());
  return std::nullopt;
}

std::unique_ptr<Store> Store::load(const std::filesystem::path& dir, const std::filesystem::path& tables_dir) {
  std::unique_ptr<Store> s(new Store());
  s->dir_ = dir;
  s->location_ = dir.string();
  const std::filesystem::path index_path = dir / kIndexFile;
  struct stat st {};
  std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  const auto unfinished = [&](std::string_view what) {
    if (std::optional<std::string> left = unfinished_store_beside(dir))
      throw StoreError(fmt::format("{}: {}; {}", dir.string(), what, *left));
  };
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) unfinished("no such store");
    throw StoreError(fmt::format("{}: {}", dir.string(), std::strerror(err)));
  }
  if (::stat(index_path.c_str(), &st) != 0) {
    const int err = errno;
    // The packer's temporary folder itself (records written, index not yet complete).
    size_t t = name.rfind(".tmp-");
    bool tmp_name = !name.empty() && name[0] == '.' && t != std::string::npos && t + 5 < name.size() &&
                    name.find_first_not_of("0123456789", t + 5) == std::string::npos;
    if (err == ENOENT && (tmp_name || ::stat((dir / kIndexPartialFile).c_str(), &st) == 0))
      throw StoreError(fmt::format("{}: not a fidelityfs store: no {} (an unfinished pack, killed before it "
                                   "completed; run fidelityfs pack again)", dir.string(), kIndexFile));
    if (err == ENOENT) unfinished(fmt::format("not a fidelityfs store: no {}", kIndexFile));
    throw StoreError(fmt::format("{}: not a fidelityfs store: {}", index_path.string(), std::strerror(err)));
  }

  s->load_tables(index_path, index_path.string(), tables_dir);
  return s;
}

void Store::load_tables(const std::filesystem::path& index_path, const std::string& display,
                        const std::filesystem::path& tables_dir) {
  if (tables_dir.empty()) return load_index(index_path, display);
  Result<IndexIdentity> identity = identify_index(index_path);
  if (!identity) return load_index(index_path, display);  // its error names the index
  const std::filesystem::path file = tables_file_for(tables_dir, index_path);
  auto adopt = [&](std::unique_ptr<MappedTables> m) {
    levels_ = m->meta().levels;
    format_version_ = m->meta().format_version;
    layout_ = m->meta().layout;
    seed_ = m->meta().seed;
    records_ = std::move(m->meta().records);
    clips_ = std::move(m->meta().clips);
    videos_ = std::move(m->meta().videos);
    t_ = m->tables();
    mapped_ = std::move(m);
    tables_file_ = file;
  };
  Result<std::unique_ptr<MappedTables>> mapped = MappedTables::map(file, *identity);
  if (mapped) return adopt(std::move(mapped).value());
  // No file yet, or one made from another index or damaged: made (again) from the index.
  load_index(index_path, display);
  TablesMeta meta{levels_, format_version_, layout_, seed_, records_, clips_, videos_};
  if (Status w = write_tables_file(file, index_path, *identity, meta, t_); !w) {
    tables_problem_ = w.error().message;
    return;
  }
  mapped = MappedTables::map(file, *identity);
  if (!mapped) {
    tables_problem_ = mapped.error().message;
    return;
  }
  adopt(std::move(mapped).value());
  // Swapped with empty ones: clear() and `= {}` keep the capacity.
  std::vector<File>().swap(files_);
  std::vector<Dir>().swap(dirs_);
  std::vector<uint32_t>().swap(child_dirs_);
  std::vector<uint32_t>().swap(child_files_);
  std::vector<Piece>().swap(pieces_);
  std::string().swap(names_);
  std::vector<uint32_t>().swap(record_begin_);
  std::vector<uint32_t>().swap(record_files_);
  ::malloc_trim(0);
}

void Store::view_vectors() {
  t_ = TableSpans{files_, dirs_, pieces_, child_dirs_, child_files_, record_begin_, record_files_, names_};
}

namespace {

// Why `name` cannot be one component of a path in the mount (a name of the store's tree), or
// nullptr if it can.
const char* bad_component(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (name == "." || name == "..") return "a name the kernel reserves";
  if (name.find('/') != std::string_view::npos) return "a name holding '/'";
  if (name.find('\0') != std::string_view::npos) return "a name holding a NUL byte";
  if (name.size() > 255) return "a name over 255 bytes";
  return nullptr;
}

}  // namespace

void Store::load_index(const std::filesystem::path& index_path, const std::string& ip) {
  const std::unique_ptr<SqliteDb> opened = must(SqliteDb::open(index_path.string(), /*writable=*/false));
  SqliteDb& db = *opened;
  const bool offsets_stored = load_meta(db, ip) == 1;  // format 2 derives them (derive_offsets)
  load_records(db, ip);
  load_dirs(db, ip);
  reserve_files(db, index_path);
  load_files(db, ip, offsets_stored);
  view_vectors();  // the sorts below compare names
  link_children();
  check_unique_names(ip);
  list_record_files();
  view_vectors();
  load_unreferenced(db, ip);
  close_slot_gaps(ip);
  load_clips(db, ip);
  load_videos(db, ip);
  if (!offsets_stored) derive_offsets(ip);
  std::vector<Unreferenced>().swap(unreferenced_);
  pieces_.shrink_to_fit();
  names_.shrink_to_fit();
  files_.shrink_to_fit();
  view_vectors();
  // What the load freed (SQLite's cache, the sort's lists) goes back to the system.
  ::malloc_trim(0);
}

// The meta table: checks the format version and level count; returns the version.
int64_t Store::load_meta(SqliteDb& db, const std::string& ip) {
  if (!db.exec("SELECT 1 FROM meta LIMIT 1"))
    throw StoreError(fmt::format("{}: not a fidelityfs index (unreadable or corrupt database)", ip));
  int64_t version = meta_int(db, "format_version");
  if (version > kFormatVersion)
    throw StoreError(fmt::format("{}: store format version {} is newer than this fidelityfs supports ({}); "
                                 "upgrade fidelityfs", ip, version, kFormatVersion));
  if (version < 1) throw StoreError(fmt::format("{}: corrupt index: format version {}", ip, version));
  int64_t levels = meta_int(db, "levels");
  if (levels < 1 || levels > 64) throw StoreError(fmt::format("{}: corrupt index: {} levels", ip, levels));
  levels_ = static_cast<int>(levels);
  seed_ = meta_u64(db, "seed");
  // Packs of an older format lack these: "" then.
  provenance_.shard = meta_optional(db, "shard").value_or("");
  provenance_.source_digest = meta_optional(db, "source_digest").value_or("");
  provenance_.level_scripts = meta_optional(db, "level_scripts").value_or("");
  // Stores of format 3 and older have scan records only and no `layout` key.
  const std::string layout = meta_optional(db, "layout").value_or("scan");
  if (!parse_layout(layout, layout_))
    throw StoreError(fmt::format("{}: corrupt index: meta 'layout' is '{}' (scan or file)", ip, layout));
  if (layout_ == StoreLayout::file && version < 4)
    throw StoreError(fmt::format("{}: corrupt index: a file-layout store of format version {} (file records "
                                 "came with version 4)", ip, version));
  format_version_ = static_cast<int>(version);
  return version;
}

void Store::load_records(SqliteDb& db, const std::string& ip) {
  auto corrupt = [&](const std::string& what) { return corrupt_index(ip, what); };
  // Format 3 records the id in each record's header; before, it was always the record's id.
  auto q = must(db.prepare(format_version_ >= 3
                          ? "SELECT id, path, layout, size, region_ends, header_id FROM records ORDER BY id"
                          : "SELECT id, path, layout, size, region_ends, id FROM records ORDER BY id"));
  while (must(q.step())) {
    Record r;
    r.id = static_cast<uint32_t>(q.integer(0));
    if (r.id != records_.size()) throw corrupt("record ids are not 0..n-1");
    const int64_t header_id = q.integer(5);
    if (header_id < 0 || header_id > 0xFFFFFFFF) throw corrupt(fmt::format("record {} has header id {}", r.id, header_id));
    r.header_id = static_cast<uint32_t>(header_id);
    r.path = q.text(1);
    if (r.path.empty() || r.path.find("..") != std::string::npos || r.path.front() == '/')
      throw corrupt(fmt::format("record {} has a bad path '{}'", r.id, r.path));
    int64_t layout = q.integer(2);
    if (layout < 0 || layout > 2) throw corrupt(fmt::format("record {} has layout {}", r.id, layout));
    const bool jpeg_records = layout != static_cast<int64_t>(RecordLayout::whole);
    if (jpeg_records && layout != static_cast<int64_t>(jpeg_record_layout(layout_)))
      throw corrupt(fmt::format("record {} has layout {}, which a {}-layout store does not have", r.id, layout,
                                layout_name(layout_)));
    r.layout = static_cast<RecordLayout>(layout);
    r.size = static_cast<uint64_t>(q.integer(3));
    auto ends = q.blob(4);
    if (ends.size() % 8 != 0) throw corrupt(fmt::format("record {} region_ends", r.id));
    for (size_t i = 0; i < ends.size(); i += 8) r.region_end.push_back(get_le(ends.data() + i, 8));
    records_.push_back(std::move(r));
  }
}

void Store::load_dirs(SqliteDb& db, const std::string& ip) {
  auto corrupt = [&](const std::string& what) { return corrupt_index(ip, what); };
  auto q = must(db.prepare("SELECT id, parent, name, mtime_ns FROM dirs ORDER BY id"));
  while (must(q.step())) {
    Dir d;
    d.id = static_cast<uint32_t>(q.integer(0));
    if (d.id != dirs_.size()) throw corrupt("directory ids are not 0..n-1");
    int64_t parent = q.integer(1);
    auto name = q.blob(2);
    d.name_off = static_cast<uint32_t>(names_.size());
    d.name_len = static_cast<uint32_t>(name.size());
    names_.append(reinterpret_cast<const char*>(name.data()), name.size());
    d.mtime_ns = q.integer(3);
    if (parent < 0 || (d.id != 0 && parent >= d.id) || (d.id == 0 && parent != 0))
      throw corrupt(fmt::format("directory {} has parent {}", d.id, parent));
    const std::string_view n(reinterpret_cast<const char*>(name.data()), name.size());
    if (d.id == 0 && !n.empty()) throw corrupt(fmt::format("the root directory has the name '{}'", printable(n)));
    if (const char* why = d.id == 0 ? nullptr : bad_component(n))
      throw corrupt(fmt::format("directory {} has {}: '{}'", d.id, why, printable(n)));
    d.parent = static_cast<uint32_t>(parent);
    dirs_.push_back(d);
  }
  if (dirs_.empty()) throw corrupt("no root directory");
}

// The tables are sized once (ids are 0..n-1, so max(id) gives n in one B-tree descent): growing
// them by doubling would leave copies and slack in the daemon's memory. A corrupt max(id) must
// not size them: a files row takes at least kMinFileRowBytes of the database, which bounds n by
// the file's size (the rows are checked one by one in load_files).
void Store::reserve_files(SqliteDb& db, const std::filesystem::path& index_path) {
  constexpr int64_t kMinFileRowBytes = 16;  // 12 columns' header bytes, cell header, pointer
  std::error_code size_ec;
  const auto db_bytes = static_cast<int64_t>(std::filesystem::file_size(index_path, size_ec));
  auto last = must(db.prepare("SELECT max(id) FROM files"));
  if (!size_ec && must(last.step())) {
    const int64_t n = last.integer(0) + 1;
    if (n > 0 && n <= db_bytes / kMinFileRowBytes) {
      files_.reserve(static_cast<size_t>(n));
      record_files_.reserve(static_cast<size_t>(n));
      child_files_.reserve(static_cast<size_t>(n));
    }
  }
}

void Store::load_files(SqliteDb& db, const std::string& ip, bool offsets_stored) {
  auto corrupt = [&](const std::string& what) { return corrupt_index(ip, what); };
  auto q = must(db.prepare(
      "SELECT id, dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, pieces "
      "FROM files ORDER BY id"));
  while (must(q.step())) {
    File f;
    f.id = static_cast<uint32_t>(q.integer(0));
    if (f.id != files_.size()) throw corrupt("file ids are not 0..n-1");
    int64_t dir_id = q.integer(1);
    if (dir_id < 0 || dir_id >= static_cast<int64_t>(dirs_.size()))
      throw corrupt(fmt::format("file {} in unknown directory {}", f.id, dir_id));
    f.dir = static_cast<uint32_t>(dir_id);
    auto name = q.blob(2);
    f.name_off = static_cast<uint32_t>(names_.size());
    f.name_len = static_cast<uint32_t>(name.size());
    names_.append(reinterpret_cast<const char*>(name.data()), name.size());
    if (const char* why = bad_component({reinterpret_cast<const char*>(name.data()), name.size()}))
      throw corrupt(fmt::format("file {} has {}: '{}'", f.id, why,
                                printable({reinterpret_cast<const char*>(name.data()), name.size()})));
    int64_t kind = q.integer(3);
    const int64_t max_kind = format_version_ >= kVideoStreamsFormatVersion ? 3 : 2;
    if (kind < 0 || kind > max_kind) throw corrupt(fmt::format("file {} has kind {}", f.id, kind));
    f.kind = static_cast<FileKind>(kind);
    int64_t script = q.integer(4);
    if (script < 0 || script > 0xFFFFFFFF) throw corrupt(fmt::format("file {} has script {}", f.id, script));
    f.script = static_cast<uint32_t>(script);
    int64_t rec = q.integer(5);
    if (rec < 0 || rec >= static_cast<int64_t>(records_.size()))
      throw corrupt(fmt::format("file {} in unknown record {}", f.id, rec));
    f.record = static_cast<uint32_t>(rec);
    f.slot = static_cast<uint32_t>(q.integer(6));
    f.width = static_cast<uint32_t>(q.integer(7));
    f.height = static_cast<uint32_t>(q.integer(8));
    if (f.kind == FileKind::l3) {
      codec::L3Shape shape;
      if (!codec::shape_from_code(f.script, f.width, f.height, shape) || f.width == 0 || f.height == 0 ||
          f.width > codec::kL3MaxDimension || f.height > codec::kL3MaxDimension)
        throw corrupt(fmt::format("file {} (l3) has a bad shape (script {}, {}x{})", f.id, f.script, f.width, f.height));
    }
    f.source_size = static_cast<uint64_t>(q.integer(9));
    f.mtime_ns = q.integer(10);
    load_pieces(f, q.blob(11), offsets_stored, ip);
    files_.push_back(f);
  }
}

// A file's pieces from its blob: format 1 stores offsets, sizes and checksums; format 2 sizes and
// checksums, the offsets follow in derive_offsets once the records' slot orders are known.
void Store::load_pieces(File& f, std::span<const uint8_t> blob, bool offsets_stored, const std::string& ip) {
  auto corrupt = [&](const std::string& what) { return corrupt_index(ip, what); };
  size_t want = f.kind == FileKind::jpeg ? static_cast<size_t>(levels_) + 1 : 1;
  f.first_piece = static_cast<uint32_t>(pieces_.size());
  f.piece_count = static_cast<uint32_t>(want);
  if (offsets_stored) {
    if (blob.size() != want * kPieceBlobSizeV1)
      throw corrupt(fmt::format("file {} has {} piece bytes, expected {}", f.id, blob.size(), want * kPieceBlobSizeV1));
    const uint64_t rec_size = records_[f.record].size;
    for (size_t i = 0; i < want; ++i) {
      const uint8_t* p = blob.data() + i * kPieceBlobSizeV1;
      Piece piece{get_le(p, 8), static_cast<uint32_t>(get_le(p + 8, 4)), static_cast<uint32_t>(get_le(p + 12, 4))};
      if (piece.offset < kRecordHeaderSize || piece.offset > rec_size || piece.size > rec_size - piece.offset)
        throw corrupt(fmt::format("file {} piece {} lies outside record {}", f.id, i, f.record));
      pieces_.push_back(piece);
    }
  } else {  // sizes and checksums; the offsets follow below, once the records' slot orders are known
    switch (decode_pieces(blob, want, pieces_)) {
      case PiecesBlob::kOk: break;
      case PiecesBlob::kMalformed:
        throw corrupt(fmt::format("file {} has a malformed pieces blob ({} pieces expected)", f.id, want));
      case PiecesBlob::kTrailing: throw corrupt(fmt::format("file {} has bytes after its {} pieces", f.id, want));
    }
  }
}

// Children lists, sorted bytewise by name.
void Store::link_children() {
  std::vector<std::vector<uint32_t>> sub(dirs_.size()), fil(dirs_.size());
  for (const Dir& d : dirs_)
    if (d.id != 0) sub[d.parent].push_back(d.id);
  for (const File& f : files_) fil[f.dir].push_back(f.id);
  for (Dir& d : dirs_) {
    auto& sd = sub[d.id];
    auto& sf = fil[d.id];
    // Pack numbers files and folders in its walk's order, names sorted: the lists are usually
    // in order already: checking takes one comparison a name, sorting about log2(n).
    const auto dir_less = [&](uint32_t a, uint32_t b) { return name(dirs_[a]) < name(dirs_[b]); };
    const auto file_less = [&](uint32_t a, uint32_t b) { return name(files_[a]) < name(files_[b]); };
    if (!std::is_sorted(sd.begin(), sd.end(), dir_less)) std::sort(sd.begin(), sd.end(), dir_less);
    if (!std::is_sorted(sf.begin(), sf.end(), file_less)) std::sort(sf.begin(), sf.end(), file_less);
    d.subdir_begin = static_cast<uint32_t>(child_dirs_.size());
    d.subdir_count = static_cast<uint32_t>(sd.size());
    child_dirs_.insert(child_dirs_.end(), sd.begin(), sd.end());
    d.file_begin = static_cast<uint32_t>(child_files_.size());
    d.file_count = static_cast<uint32_t>(sf.size());
    child_files_.insert(child_files_.end(), sf.begin(), sf.end());
  }
}

// No two entries of one folder share a name (folders and files alike), and the root holds no
// entry named like the mount's control folder. Children lists are sorted (link_children).
void Store::check_unique_names(const std::string& ip) const {
  for (const Dir& d : dirs_) {
    const auto sd = std::span(child_dirs_).subspan(d.subdir_begin, d.subdir_count);
    const auto sf = std::span(child_files_).subspan(d.file_begin, d.file_count);
    auto twice = [&](std::string_view n) {
      return corrupt_index(ip, fmt::format("directory {} ('{}') holds two entries named '{}'", d.id,
                                           printable(relative_path(d)), printable(n)));
    };
    for (size_t i = 1; i < sd.size(); ++i)
      if (name(dirs_[sd[i]]) == name(dirs_[sd[i - 1]])) throw twice(name(dirs_[sd[i]]));
    for (size_t i = 1; i < sf.size(); ++i)
      if (name(files_[sf[i]]) == name(files_[sf[i - 1]])) throw twice(name(files_[sf[i]]));
    for (size_t i = 0, j = 0; i < sd.size() && j < sf.size();) {  // a folder and a file of one name
      const std::string_view a = name(dirs_[sd[i]]), b = name(files_[sf[j]]);
      if (a == b) throw twice(a);
      a < b ? ++i : ++j;
    }
    if (d.id == 0) {
      for (uint32_t c : sd)
        if (name(dirs_[c]) == ".fidelity") throw corrupt_index(ip, "the root holds '.fidelity', the mount's control folder");
      for (uint32_t c : sf)
        if (name(files_[c]) == ".fidelity") throw corrupt_index(ip, "the root holds '.fidelity', the mount's control folder");
    }
  }
}

// Files of each record in slot order (storage order).
void Store::list_record_files() {
  record_begin_.assign(records_.size() + 1, 0);
  for (const File& f : files_) ++record_begin_[f.record + 1];
  for (size_t r = 1; r < record_begin_.size(); ++r) record_begin_[r] += record_begin_[r - 1];
  // Slots are 0..n-1 in every record pack writes: each file goes straight to its place. A
  // store where they are not (an error in format 2, see derive_offsets) is sorted by slot.
  constexpr uint32_t kEmpty = UINT32_MAX;
  record_files_.assign(files_.size(), kEmpty);
  bool placed = true;
  for (const File& f : files_) {
    const uint32_t begin = record_begin_[f.record], count = record_begin_[f.record + 1] - begin;
    if (f.slot >= count || record_files_[begin + f.slot] != kEmpty) {
      placed = false;
      break;
    }
    record_files_[begin + f.slot] = f.id;
  }
  if (!placed) {
    std::vector<uint32_t> fill(record_begin_.begin(), record_begin_.end() - 1);
    for (const File& f : files_) record_files_[fill[f.record]++] = f.id;
    const auto slot_less = [&](uint32_t a, uint32_t b) { return files_[a].slot < files_[b].slot; };
    for (size_t r = 0; r < records_.size(); ++r)
      std::sort(record_files_.begin() + record_begin_[r], record_files_.begin() + record_begin_[r + 1],
                slot_less);
  }
}

// Format 2 and later (docs/FORMAT.md "Piece offsets"): piece i of a file in a scan record lies in
// region i; every piece of a file in a whole or file record lies in region 0, the file's pieces
// back to back; within a region, the pieces follow each other in slot order from the region's
// start, and fill it exactly.
void Store::derive_offsets(const std::string& ip) {
  auto corrupt = [&](const std::string& what) { return StoreError(fmt::format("{}: corrupt index: {}", ip, what)); };
  std::vector<uint64_t> pos;
  for (const Record& rec : records_) {
    const bool scan = rec.layout == RecordLayout::scan;
    const size_t regions = scan ? static_cast<size_t>(levels_) + 1 : 1;
    if (rec.region_end.size() != regions)
      throw corrupt(fmt::format("record {} has {} regions, its layout has {}", rec.id, rec.region_end.size(), regions));
    pos.assign(regions, 0);
    uint64_t start = kRecordHeaderSize;
    for (size_t k = 0; k < regions; ++k) {
      if (rec.region_end[k] < start) throw corrupt(fmt::format("record {} region {} ends before it starts", rec.id, k));
      pos[k] = start;
      start = rec.region_end[k];
    }
    if (start != rec.size)
      throw corrupt(fmt::format("record {}: its regions end at {}, its size is {}", rec.id, start, rec.size));
    const std::span<const uint32_t> members = record_files(rec.id);
    const std::span<ClipRun> runs = std::span<ClipRun>(clips_).subspan(rec.clip_begin, rec.clip_count);
    size_t next_run = 0;
    const std::span<const Unreferenced> gaps = unreferenced_in(rec.id);
    size_t next_gap = 0;
    // An unreferenced row's pieces lie where a file's would in its slot (close_slot_gaps).
    const auto step_over_gaps = [&](size_t files_before) {
      for (; next_gap < gaps.size() && gaps[next_gap].files_before == files_before; ++next_gap)
        for (size_t i = 0; i < gaps[next_gap].sizes.size(); ++i) {
          const size_t region = scan ? i : 0;
          if (gaps[next_gap].sizes[i] > rec.region_end[region] - pos[region])
            throw corrupt(fmt::format("record {}: an unreferenced piece of slot {} lies outside it", rec.id,
                                      gaps[next_gap].slot));
          pos[region] += gaps[next_gap].sizes[i];
        }
    };
    // Storage order visits the file rows at random: fetch rows and pieces ahead of their turn.
    constexpr size_t kRowsAhead = 16, kPiecesAhead = 8;
    for (size_t k = 0; k < members.size(); ++k) {
      if (k + kRowsAhead < members.size()) __builtin_prefetch(&files_[members[k + kRowsAhead]]);
      if (k + kPiecesAhead < members.size()) {
        const File& next = files_[members[k + kPiecesAhead]];
        const auto* first = reinterpret_cast<const char*>(pieces_.data() + next.first_piece);
        const auto* last = reinterpret_cast<const char*>(pieces_.data() + next.first_piece + next.piece_count);
        for (const char* line = first; line < last; line += 64) __builtin_prefetch(line, 1);
      }
      step_over_gaps(k);
      const File& f = files_[members[k]];
      if (f.slot != k) throw corrupt(fmt::format("record {}: its slots are not 0..{}", rec.id, members.size() - 1));
      if ((f.kind == FileKind::jpeg) != (rec.layout != RecordLayout::whole))
        throw corrupt(fmt::format("file {} ({}) in record {} of the other layout", f.id, kind_name(f.kind), rec.id));
      if (rec.layout == RecordLayout::file && next_run < runs.size() && runs[next_run].first_slot == k) {
        place_clip_run(runs[next_run], pos[0], rec.region_end[0], ip);
        k += runs[next_run++].frames - 1;
        continue;
      }
      for (uint32_t i = 0; i < f.piece_count; ++i) {
        Piece& p = pieces_[f.first_piece + i];
        const size_t region = scan ? i : 0;
        if (p.size > rec.region_end[region] - pos[region])
          throw corrupt(fmt::format("file {} piece {} lies outside record {}", f.id, i, rec.id));
        p.offset = pos[region];
        pos[region] += p.size;
      }
    }
    step_over_gaps(members.size());
    for (size_t k = 0; k < regions; ++k)
      if (pos[k] != rec.region_end[k])
        throw corrupt(fmt::format("record {} region {}: its pieces end at {}, the region at {}", rec.id, k, pos[k],
                                  rec.region_end[k]));
  }
}

}  // namespace fid::index
