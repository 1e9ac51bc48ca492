#include "index/tables_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstddef>
#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <type_traits>

#include "common/fd.h"
#include "common/posix_io.h"
#include "common/private_dir.h"
#include "index/format.h"

namespace fid::index {

namespace fs = std::filesystem;

namespace {

// docs/FORMAT.md "The tables cache".
constexpr char kTablesMagic[8] = {'F', 'I', 'D', 'T', 'A', 'B', 'L', 'E'};
constexpr uint32_t kTablesLayoutVersion = 6;
constexpr uint32_t kByteOrderMark = 0x01020304;
constexpr uint64_t kSectionAlign = 64;
constexpr uint32_t kMaxIndexPathBytes = 4096;
constexpr size_t kHeadHashBytes = 4096;
constexpr std::string_view kTablesSuffix = ".tables";
constexpr std::string_view kTempMarker = ".tables.tmp-";

enum Section : size_t { records, files, dirs, pieces, child_dirs, child_files, record_begin, record_files, names, videos, kSections };

struct Header {
  char magic[8];
  uint32_t layout_version;
  uint32_t byte_order;
  uint32_t file_row_bytes, dir_row_bytes, piece_row_bytes;  // sizeof(File), sizeof(Dir), sizeof(Piece)
  uint16_t levels;
  uint8_t store_layout;  // StoreLayout
  uint8_t zero;
  int32_t format_version;
  uint32_t index_path_bytes;  // the index's canonical path follows the header
  uint64_t seed;
  uint64_t index_size;
  int64_t index_mtime_ns;
  uint64_t index_inode, index_device, index_head_hash;
  uint64_t section_offset[kSections];
  uint64_t section_bytes[kSections];
  uint64_t file_bytes;
  uint64_t body_hash;    // XXH3-64 of every byte after the index path
  uint64_t header_hash;  // XXH3-64 of the header before this field, then the index path
};
static_assert(std::is_trivially_copyable_v<Header> && sizeof(Header) == 272, "no padding in the header");
static_assert(sizeof(File) == 64 && sizeof(Dir) == 40 && sizeof(Piece) == 16, "rows without hidden padding");

template <typename T>
std::span<const uint8_t> raw(std::span<const T> rows) {
  return {reinterpret_cast<const uint8_t*>(rows.data()), rows.size_bytes()};
}

uint64_t align_up(uint64_t v) { return (v + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

uint64_t header_hash(const Header& h, std::string_view index_path) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &h, offsetof(Header, header_hash));
  XXH3_64bits_update(st, index_path.data(), index_path.size());
  const uint64_t v = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return v;
}

std::string canonical_text(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return (ec ? fs::absolute(p, ec) : c).string();
}

// Per record: layout, header id, size, path, region ends, then its clip runs.
std::vector<uint8_t> encode_records(std::span<const Record> recs, std::span<const ClipRun> clips) {
  std::vector<uint8_t> out;
  for (const Record& r : recs) {
    put_le(out, static_cast<uint8_t>(r.layout), 1);
    put_le(out, r.header_id, 4);
    put_le(out, r.size, 8);
    put_le(out, r.path.size(), 4);
    out.insert(out.end(), r.path.begin(), r.path.end());
    put_le(out, r.region_end.size(), 4);
    for (uint64_t e : r.region_end) put_le(out, e, 8);
    put_le(out, r.clip_count, 4);
    for (const ClipRun& c : clips.subspan(r.clip_begin, r.clip_count)) {
      for (uint32_t v : {c.id, c.dir, c.first_slot, c.frames}) put_le(out, v, 4);
      put_le(out, c.offset, 8);
      put_le(out, c.level_end.size(), 4);
      for (uint64_t e : c.level_end) put_le(out, e, 8);
    }
  }
  return out;
}

bool decode_records(const uint8_t* p, const uint8_t* end, std::vector<Record>& out, std::vector<ClipRun>& clips) {
  auto take = [&](int bytes, uint64_t& v) {
    if (end - p < bytes) return false;
    v = get_le(p, bytes);
    p += bytes;
    return true;
  };
  auto take_u64s = [&](std::vector<uint64_t>& v) {
    uint64_t n = 0;
    if (!take(4, n) || static_cast<uint64_t>(end - p) / 8 < n) return false;
    v.resize(n);
    for (uint64_t& e : v) take(8, e);
    return true;
  };
  while (p < end) {
    Record r;
    r.id = static_cast<uint32_t>(out.size());
    uint64_t layout = 0, header_id = 0, n = 0;
    if (!take(1, layout) || layout > 2 || !take(4, header_id) || !take(8, r.size) || !take(4, n) || static_cast<uint64_t>(end - p) < n) return false;
    r.layout = static_cast<RecordLayout>(layout);
    r.header_id = static_cast<uint32_t>(header_id);
    r.path.assign(reinterpret_cast<const char*>(p), n);
    p += n;
    if (!take_u64s(r.region_end) || !take(4, n) || static_cast<uint64_t>(end - p) / 24 < n) return false;
    r.clip_begin = static_cast<uint32_t>(clips.size());
    r.clip_count = static_cast<uint32_t>(n);
    for (uint64_t k = 0; k < n; ++k) {
      ClipRun c;
      uint64_t v[4];
      for (uint64_t& x : v)
        if (!take(4, x)) return false;
      c.id = static_cast<uint32_t>(v[0]), c.dir = static_cast<uint32_t>(v[1]), c.record = r.id;
      c.first_slot = static_cast<uint32_t>(v[2]), c.frames = static_cast<uint32_t>(v[3]);
      if (!take(8, c.offset) || !take_u64s(c.level_end)) return false;
      clips.push_back(std::move(c));
    }
    out.push_back(std::move(r));
  }
  return true;
}

// Per video: folder, frames, frame rate, width, height (u32), source size (u64), then its name,
// codec, stream codec and extradata (u32 length, bytes), then the stream's width, height, GOP
// (u32) and stored bytes (u64).
std::vector<uint8_t> encode_videos(std::span<const VideoSource> videos) {
  std::vector<uint8_t> out;
  for (const VideoSource& v : videos) {
    for (uint32_t x : {v.dir, v.frames, v.fps_num, v.fps_den, v.width, v.height}) put_le(out, x, 4);
    put_le(out, v.source_size, 8);
    for (const std::string* s : {&v.name, &v.codec, &v.stream.codec}) {
      put_le(out, s->size(), 4);
      out.insert(out.end(), s->begin(), s->end());
    }
    put_le(out, v.stream.extradata.size(), 4);
    out.insert(out.end(), v.stream.extradata.begin(), v.stream.extradata.end());
    for (uint32_t x : {v.stream.width, v.stream.height, v.stream.gop}) put_le(out, x, 4);
    put_le(out, v.stream.stored_bytes, 8);
  }
  return out;
}

bool decode_videos(const uint8_t* p, const uint8_t* end, std::vector<VideoSource>& out) {
  auto take = [&](int bytes, uint64_t& v) {
    if (end - p < bytes) return false;
    v = get_le(p, bytes);
    p += bytes;
    return true;
  };
  auto take_text = [&](std::string& s) {
    uint64_t n = 0;
    if (!take(4, n) || static_cast<uint64_t>(end - p) < n) return false;
    s.assign(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  };
  while (p < end) {
    uint64_t v[6];
    for (uint64_t& x : v)
      if (!take(4, x)) return false;
    VideoSource s{static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]), static_cast<uint32_t>(v[2]),
                  static_cast<uint32_t>(v[3]), static_cast<uint32_t>(v[4]), static_cast<uint32_t>(v[5]), 0, {}, {}, {}};
    std::string extradata;
    uint64_t w = 0, h = 0, gop = 0;
    if (!take(8, s.source_size) || !take_text(s.name) || !take_text(s.codec) || !take_text(s.stream.codec) ||
        !take_text(extradata) || !take(4, w) || !take(4, h) || !take(4, gop) || !take(8, s.stream.stored_bytes))
      return false;
    s.stream.extradata.assign(extradata.begin(), extradata.end());
    s.stream.width = static_cast<uint32_t>(w), s.stream.height = static_cast<uint32_t>(h);
    s.stream.gop = static_cast<uint32_t>(gop);
    if (!out.empty() && s.dir <= out.back().dir) return false;
    out.push_back(std::move(s));
  }
  return true;
}

// Every row of mapped tables points inside them, as the loader made them: a row that does not
// (a file damaged under a matching checksum, a build whose rows mean something else) is refused
// here rather than read out of bounds later. Names, sorting and uniqueness are left to the checksum.
const char* out_of_bounds(const TableSpans& t, std::span<const Record> records, std::span<const ClipRun> clips,
                          std::span<const VideoSource> videos, int levels) {
  auto within = [](uint64_t begin, uint64_t count, size_t size) { return begin <= size && count <= size - begin; };
  if (levels < 1 || levels > 64) return "a level count out of range";
  if (t.dirs.empty() || t.dirs[0].parent != 0) return "no root folder";
  for (size_t i = 0; i < t.dirs.size(); ++i) {
    const Dir& d = t.dirs[i];
    if (d.id != i || (i != 0 && d.parent >= i) || !within(d.name_off, d.name_len, t.names.size()) ||
        !within(d.subdir_begin, d.subdir_count, t.child_dirs.size()) || !within(d.file_begin, d.file_count, t.child_files.size()))
      return "a folder row out of bounds";
  }
  for (uint32_t c : t.child_dirs)
    if (c == 0 || c >= t.dirs.size()) return "a subfolder list out of bounds";
  for (uint32_t c : t.child_files)
    if (c >= t.files.size()) return "a file list out of bounds";
  for (size_t i = 0; i < t.files.size(); ++i) {
    const File& f = t.files[i];
    const uint32_t pieces = f.kind == FileKind::jpeg ? static_cast<uint32_t>(levels) + 1 : 1;
    if (f.id != i || f.dir >= t.dirs.size() || !within(f.name_off, f.name_len, t.names.size()) ||
        static_cast<uint32_t>(f.kind) > static_cast<uint32_t>(FileKind::frame) || f.record >= records.size() ||
        f.piece_count != pieces || (f.kind == FileKind::frame && (f.script > f.id || t.files[f.id - f.script].dir != f.dir)) ||
        !within(f.first_piece, f.piece_count, t.pieces.size()))
      return "a file row out of bounds";
    const uint64_t record_size = records[f.record].size;
    for (const Piece& p : t.pieces.subspan(f.first_piece, f.piece_count))
      if (p.offset < kRecordHeaderSize || p.offset > record_size || p.size > record_size - p.offset)
        return "a piece outside its record";
  }
  if (t.record_begin.front() != 0 || t.record_begin.back() != t.record_files.size() ||
      !std::is_sorted(t.record_begin.begin(), t.record_begin.end()))
    return "record lists out of bounds";
  for (uint32_t f : t.record_files)
    if (f >= t.files.size()) return "a record list out of bounds";
  for (size_t i = 0; i < clips.size(); ++i) {
    const ClipRun& c = clips[i];
    const uint64_t record_files = t.record_begin[c.record + 1] - t.record_begin[c.record];
    const bool ends_ok = c.level_end.empty() || (c.level_end.size() == static_cast<size_t>(levels) + 1 &&
                                                 c.offset >= kRecordHeaderSize && c.level_end.back() <= records[c.record].size);
    if (c.id != i || c.dir >= t.dirs.size() || c.frames == 0 || !within(c.first_slot, c.frames, record_files) || !ends_ok)
      return "a clip run out of bounds";
  }
  for (const VideoSource& v : videos)
    if (v.dir == 0 || v.dir >= t.dirs.size()) return "a video out of bounds";
  return nullptr;
}

// Opens the file `name` of the tables folder for reading: never through a symbolic link, and
// never blocking on a FIFO put in its place (the caller checks that it is a regular file).
int open_in(int dir, const std::string& name) { return ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC); }

bool is_regular(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

// The header and index path of a tables file, for pruning; false if it is not one.
bool read_index_path(int dir, const std::string& name, std::string& index_path) {
  const Fd fd(open_in(dir, name));
  Header h{};
  if (fd.get() < 0 || !is_regular(fd.get()) || !pread_exact(fd.get(), reinterpret_cast<uint8_t*>(&h), sizeof h, 0, name).ok() ||
      std::memcmp(h.magic, kTablesMagic, sizeof kTablesMagic) != 0 || h.index_path_bytes > kMaxIndexPathBytes)
    return false;
  index_path.resize(h.index_path_bytes);
  return pread_exact(fd.get(), reinterpret_cast<uint8_t*>(index_path.data()), index_path.size(), sizeof h, name).ok() &&
         header_hash(h, index_path) == h.header_hash;
}

// Tables files whose index is gone, and temporary files of processes that are gone; removed
// by name in the folder (unlinkat), so a symbolic link is removed itself, never its target.
void prune(int dir, const std::string& keep) {
  std::vector<std::string> gone;
  for (const std::string& name : names_in(dir)) {
    if (name == keep) continue;
    if (const size_t t = name.find(kTempMarker); t != std::string::npos) {
      const std::string pid = name.substr(t + kTempMarker.size());
      if (!pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos && pid.size() < 10 &&
          ::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH)
        gone.push_back(name);
      continue;
    }
    std::string index_path;
    std::error_code ec;
    if (name.ends_with(kTablesSuffix) && read_index_path(dir, name, index_path) && !fs::exists(index_path, ec) && !ec)
      gone.push_back(name);
  }
  for (const std::string& name : gone) ::unlinkat(dir, name.c_str(), 0);
}

// The folder of a tables file, checked (storage::tables_dir makes it): a folder another user
// could write to is refused, since a file planted there would be mapped as the store's tables.
Result<Fd> open_tables_dir(const fs::path& file) {
  return open_private_dir(file.parent_path(), "tables cache", /*create=*/false);
}

// The header's fields that describe the index and the layout (offsets and hashes come later).
Header header_of(const std::string& index_path, const IndexIdentity& id, const TablesMeta& meta) {
  Header h{};
  std::memcpy(h.magic, kTablesMagic, sizeof h.magic);
  h.layout_version = kTablesLayoutVersion;
  h.byte_order = kByteOrderMark;
  h.file_row_bytes = sizeof(File);
  h.dir_row_bytes = sizeof(Dir);
  h.piece_row_bytes = sizeof(Piece);
  h.levels = static_cast<uint16_t>(meta.levels);
  h.store_layout = static_cast<uint8_t>(meta.layout);
  h.format_version = meta.format_version;
  h.index_path_bytes = static_cast<uint32_t>(index_path.size());
  h.seed = meta.seed;
  h.index_size = id.size;
  h.index_mtime_ns = id.mtime_ns;
  h.index_inode = id.inode;
  h.index_device = id.device;
  h.index_head_hash = id.head_hash;
  return h;
}

}  // namespace

Result<IndexIdentity> identify_index(const fs::path& index_file) {
  Result<Fd> opened = open_regular(index_file);
  if (!opened) return std::move(opened).error();
  const Fd fd = std::move(opened).value();
  struct stat st {};
  std::vector<uint8_t> head(kHeadHashBytes);
  ssize_t n = -1;
  if (::fstat(fd.get(), &st) == 0) n = ::pread(fd.get(), head.data(), head.size(), 0);
  if (n < 0) return Error{errno, fmt::format("{}: {}", index_file.string(), std::strerror(errno))};
  IndexIdentity id;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.inode = st.st_ino;
  id.device = st.st_dev;
  id.head_hash = XXH3_64bits(head.data(), static_cast<size_t>(n));
  return id;
}

fs::path tables_file_for(const fs::path& dir, const fs::path& index_file) {
  const std::string key = canonical_text(index_file);
  return dir / fmt::format("{:016x}{}", XXH3_64bits(key.data(), key.size()), kTablesSuffix);
}

Status write_tables_file(const fs::path& file, const fs::path& index_file, const IndexIdentity& id,
                         const TablesMeta& meta, const TableSpans& t) {
  const std::string index_path = canonical_text(index_file);
  if (index_path.size() > kMaxIndexPathBytes)
    return Error{ENAMETOOLONG, fmt::format("{}: index path too long for a tables file", index_path)};
  const std::vector<uint8_t> recs = encode_records(meta.records, meta.clips);
  const std::vector<uint8_t> vids = encode_videos(meta.videos);
  const std::span<const uint8_t> parts[kSections] = {
      recs,           raw(t.files),       raw(t.dirs),         raw(t.pieces),
      raw(t.child_dirs), raw(t.child_files), raw(t.record_begin), raw(t.record_files),
      raw(std::span<const char>(t.names)), vids,
  };
  Header h = header_of(index_path, id, meta);
  const uint64_t body_start = align_up(sizeof(Header) + index_path.size());
  uint64_t pos = body_start;
  for (size_t s = 0; s < kSections; ++s) {
    h.section_offset[s] = pos;
    h.section_bytes[s] = parts[s].size();
    pos = align_up(pos + parts[s].size());
  }
  h.file_bytes = pos;

  Result<Fd> dir = open_tables_dir(file);
  if (!dir) return std::move(dir).error();
  const std::string name = file.filename().string();
  const std::string tmp_name = name.substr(0, name.size() - kTablesSuffix.size()) + std::string(kTempMarker) +
                               std::to_string(::getpid());
  const fs::path tmp = file.parent_path() / tmp_name;
  // Made anew (O_EXCL): whatever has the name (a crash's leftover of a process with this pid, a
  // symbolic link) is removed, never written through.
  Fd fd(create_private_file(dir->get(), tmp_name.c_str()));
  if (fd.get() < 0 && errno == EEXIST && ::unlinkat(dir->get(), tmp_name.c_str(), 0) == 0)
    fd = Fd(create_private_file(dir->get(), tmp_name.c_str()));
  if (fd.get() < 0) return Error{errno, fmt::format("{}: {}", tmp.string(), std::strerror(errno))};
  static constexpr uint8_t kZeros[kSectionAlign] = {};
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const uint64_t path_end = sizeof(Header) + index_path.size();
  const std::string what = tmp.string() + ": cannot write the tables file";
  auto bytes = [](const void* p) { return static_cast<const uint8_t*>(p); };
  Status ok = pwrite_loop(fd.get(), bytes(index_path.data()), index_path.size(), sizeof(Header), what);
  if (ok) ok = pwrite_loop(fd.get(), kZeros, body_start - path_end, path_end, what);
  XXH3_64bits_update(st, kZeros, body_start - path_end);
  for (size_t s = 0; ok && s < kSections; ++s) {
    const uint64_t end = h.section_offset[s] + parts[s].size();
    const uint64_t pad = (s + 1 < kSections ? h.section_offset[s + 1] : h.file_bytes) - end;
    ok = pwrite_loop(fd.get(), parts[s].data(), parts[s].size(), h.section_offset[s], what);
    if (ok) ok = pwrite_loop(fd.get(), kZeros, pad, end, what);
    XXH3_64bits_update(st, parts[s].data(), parts[s].size());
    XXH3_64bits_update(st, kZeros, pad);
  }
  h.body_hash = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  h.header_hash = header_hash(h, index_path);
  if (ok) ok = pwrite_loop(fd.get(), bytes(&h), sizeof h, 0, what);
  if (!fd.close() && ok) ok = io_error(errno, what);
  if (!ok) {
    ::unlinkat(dir->get(), tmp_name.c_str(), 0);
    return ok;
  }
  // Replaces whatever has the name, a symbolic link included (the link, not its target).
  if (::renameat(dir->get(), tmp_name.c_str(), dir->get(), name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir->get(), tmp_name.c_str(), 0);
    return Error{err, fmt::format("{}: {}", file.string(), std::strerror(err))};
  }
  prune(dir->get(), name);
  return {};
}

Result<std::unique_ptr<MappedTables>> MappedTables::map(const fs::path& file, const IndexIdentity& expect) {
  const std::string where = file.string();
  auto damaged = [&](const std::string& why) { return Error{EINVAL, fmt::format("{}: damaged tables file: {}", where, why)}; };
  Result<Fd> dir = open_tables_dir(file);
  if (!dir) return std::move(dir).error();
  const Fd fd(open_in(dir->get(), file.filename().string()));
  if (fd.get() < 0 && errno == ELOOP) return damaged("a symbolic link, not a file");
  if (fd.get() < 0) return Error{errno, fmt::format("{}: {}", where, std::strerror(errno))};
  struct stat st {};
  Header h{};
  if (::fstat(fd.get(), &st) != 0) return Error{errno, fmt::format("{}: {}", where, std::strerror(errno))};
  if (!S_ISREG(st.st_mode)) return damaged("not a regular file");
  if (static_cast<uint64_t>(st.st_size) < sizeof h || !pread_exact(fd.get(), reinterpret_cast<uint8_t*>(&h), sizeof h, 0, where).ok())
    return damaged("shorter than its header");
  if (std::memcmp(h.magic, kTablesMagic, sizeof h.magic) != 0) return damaged("not a tables file");
  if (h.layout_version != kTablesLayoutVersion || h.store_layout > 1 || h.byte_order != kByteOrderMark || h.file_row_bytes != sizeof(File) ||
      h.dir_row_bytes != sizeof(Dir) || h.piece_row_bytes != sizeof(Piece))
    return Error{ESTALE, fmt::format("{}: made by another build of fidelityfs", where)};
  std::string index_path;
  if (h.index_path_bytes <= kMaxIndexPathBytes) index_path.resize(h.index_path_bytes);
  if (h.index_path_bytes > kMaxIndexPathBytes ||
      !pread_exact(fd.get(), reinterpret_cast<uint8_t*>(index_path.data()), index_path.size(), sizeof h, where).ok() ||
      header_hash(h, index_path) != h.header_hash)
    return damaged("its header fails its checksum");
  const IndexIdentity made_from{h.index_size, h.index_mtime_ns, h.index_inode, h.index_device, h.index_head_hash};
  if (!(made_from == expect)) return Error{ESTALE, fmt::format("{}: made from another {}", where, index_path)};
  if (h.file_bytes != static_cast<uint64_t>(st.st_size))
    return damaged(fmt::format("{} bytes, its header says {}", st.st_size, h.file_bytes));
  uint64_t pos = align_up(sizeof(Header) + h.index_path_bytes);
  for (size_t s = 0; s < kSections; ++s) {
    if (h.section_offset[s] != pos || h.section_bytes[s] > h.file_bytes - pos)
      return damaged(fmt::format("section {} out of place", s));
    pos = align_up(pos + h.section_bytes[s]);
  }
  if (pos != h.file_bytes || h.section_bytes[files] % sizeof(File) || h.section_bytes[dirs] % sizeof(Dir) ||
      h.section_bytes[pieces] % sizeof(Piece) || h.section_bytes[child_dirs] % 4 || h.section_bytes[child_files] % 4 ||
      h.section_bytes[record_begin] % 4 || h.section_bytes[record_files] % 4)
    return damaged("sections do not fill the file in whole rows");
  void* base = ::mmap(nullptr, h.file_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Error{errno, fmt::format("{}: mmap: {}", where, std::strerror(errno))};
  std::unique_ptr<MappedTables> m(new MappedTables());
  m->base_ = base;
  m->size_ = h.file_bytes;
  const auto* bytes = static_cast<const uint8_t*>(base);
  // The whole file is read once here, in order; lookups then touch what they need.
  ::madvise(base, h.file_bytes, MADV_SEQUENTIAL);
  const uint64_t path_end = sizeof(Header) + h.index_path_bytes;
  const uint64_t body_hash = XXH3_64bits(bytes + path_end, h.file_bytes - path_end);
  ::madvise(base, h.file_bytes, MADV_NORMAL);
  if (body_hash != h.body_hash) return damaged("its contents fail their checksum");
  auto rows = [&]<typename T>(Section s, std::span<const T>& out) {
    out = {reinterpret_cast<const T*>(bytes + h.section_offset[s]), h.section_bytes[s] / sizeof(T)};
  };
  TableSpans& t = m->tables_;
  rows(files, t.files);
  rows(dirs, t.dirs);
  rows(pieces, t.pieces);
  rows(child_dirs, t.child_dirs);
  rows(child_files, t.child_files);
  rows(record_begin, t.record_begin);
  rows(record_files, t.record_files);
  t.names = {reinterpret_cast<const char*>(bytes + h.section_offset[names]), h.section_bytes[names]};
  m->meta_.levels = h.levels;
  m->meta_.layout = static_cast<StoreLayout>(h.store_layout);
  m->meta_.format_version = h.format_version;
  m->meta_.seed = h.seed;
  const uint8_t* rp = bytes + h.section_offset[records];
  if (!decode_records(rp, rp + h.section_bytes[records], m->meta_.records, m->meta_.clips))
    return damaged("its records do not parse");
  const uint8_t* vp = bytes + h.section_offset[videos];
  if (!decode_videos(vp, vp + h.section_bytes[videos], m->meta_.videos)) return damaged("its videos do not parse");
  if (t.record_begin.size() != m->meta_.records.size() + 1 || t.record_files.size() != t.files.size() || t.dirs.empty() ||
      t.child_files.size() != t.files.size() || t.child_dirs.size() + 1 != t.dirs.size())
    return damaged("its tables disagree in size");
  if (const char* why = out_of_bounds(t, m->meta_.records, m->meta_.clips, m->meta_.videos, m->meta_.levels)) return damaged(why);
  return m;
}

MappedTables::~MappedTables() {
  if (base_) ::munmap(const_cast<void*>(base_), size_);
}

}  // namespace fid::index
