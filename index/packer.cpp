#include "index/packer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "codec/image_io.h"
#include "codec/jpeg.h"
#include "codec/l3_view.h"
#include "index/format.h"
#include "index/sqlite_db.h"
#include "index/store.h"

namespace fid::index {

namespace fsys = std::filesystem;

namespace {

constexpr int kLevels = codec::kJpegLevels;
constexpr uint64_t kMaxFileBytes = 0xFFFFFFFFull;  // a piece size is a u32
// The rows of the index while the records are written (IndexWriter), inside the temporary folder.
constexpr const char* kIndexScratchFile = "index.scratch";

// A failed system call: `what` (the path and the operation), then strerror(code).
fid::Error system_error(int code, const std::string& what) {
  return fid::Error{code, fmt::format("{}: {}", what, std::strerror(code))};
}

// A pack stopped by `cancel`.
fid::Error interrupted() { return fid::Error{ECANCELED, "interrupted"}; }

// ---------------------------------------------------------------------------------------------
// Source tree walk

struct SourceDir {
  uint32_t parent = 0;
  std::string name;  // raw bytes
  std::string rel;   // relative path, for messages
  int64_t mtime_ns = 0;
};

// The walk's files, a few dozen bytes each so that ten million fit in a few hundred MiB: file i
// is an entry of the name pool, u32 folder id, u16 name length, the name's bytes. The pool is
// a list of fixed-size chunks, so that growing it never copies (nor doubles) what it holds.
class SourceFiles {
 public:
  uint32_t size() const { return static_cast<uint32_t>(entry_.size()); }
  void add(uint32_t dir, std::string_view name) {
    const size_t need = 6 + name.size();
    if (chunks_.empty() || chunks_.back().size() + need > kChunkBytes) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunkBytes);
    }
    std::string& c = chunks_.back();
    entry_.push_back((static_cast<uint64_t>(chunks_.size() - 1) << kChunkBits) | c.size());
    char head[6];
    std::memcpy(head, &dir, 4);
    const auto len = static_cast<uint16_t>(name.size());
    std::memcpy(head + 4, &len, 2);
    c.append(head, 6);
    c.append(name);
  }
  uint32_t dir(uint32_t i) const {
    uint32_t d;
    std::memcpy(&d, at(i), 4);
    return d;
  }
  std::string_view name(uint32_t i) const {
    const char* e = at(i);
    uint16_t len;
    std::memcpy(&len, e + 4, 2);
    return {e + 6, len};
  }

 private:
  static constexpr int kChunkBits = 20;
  static constexpr size_t kChunkBytes = size_t{1} << kChunkBits;  // > 6 + NAME_MAX
  const char* at(uint32_t i) const {
    return chunks_[entry_[i] >> kChunkBits].data() + (entry_[i] & (kChunkBytes - 1));
  }
  std::vector<uint64_t> entry_;
  std::vector<std::string> chunks_;
};

struct SourceTree {
  fsys::path root;
  std::vector<SourceDir> dirs;
  SourceFiles files;
  uint64_t bytes = 0;  // the files' sizes at walk time (progress)
  std::vector<std::pair<std::string, std::string>> skipped;

  std::string rel(uint32_t i) const {
    const std::string& d = dirs[files.dir(i)].rel;
    std::string_view n = files.name(i);
    return d.empty() ? std::string(n) : d + "/" + std::string(n);
  }
  fsys::path abs(uint32_t i) const { return root / rel(i); }
};

int64_t mtime_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::string join_rel(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "/" + name;
}

// Depth-first, children sorted bytewise, symlinks followed, loops cut: a parent's id is always
// smaller than its children's.
void walk(SourceTree& tree, const fsys::path& abs, uint32_t dir_id, std::vector<std::pair<dev_t, ino_t>>& ancestors,
          const std::atomic<bool>& cancel) {
  if (cancel) return;
  DIR* d = ::opendir(abs.c_str());
  if (!d) {
    tree.skipped.emplace_back(tree.dirs[dir_id].rel + "/", fmt::format("cannot list folder: {}", std::strerror(errno)));
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  const std::string parent_rel = tree.dirs[dir_id].rel;
  for (const std::string& n : names) {
    fsys::path child = abs / n;
    std::string rel = join_rel(parent_rel, n);
    if (dir_id == 0 && n == ".fidelity") {
      tree.skipped.emplace_back(rel, "name reserved for the mount's control folder");
      continue;
    }
    struct stat st {};
    if (::stat(child.c_str(), &st) != 0) {
      tree.skipped.emplace_back(rel, fmt::format("cannot stat: {}", std::strerror(errno)));
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      bool loop = std::any_of(ancestors.begin(), ancestors.end(),
                              [&](auto& a) { return a.first == st.st_dev && a.second == st.st_ino; });
      if (loop) {
        tree.skipped.emplace_back(rel + "/", "symlink loop (folder is its own ancestor)");
        continue;
      }
      auto id = static_cast<uint32_t>(tree.dirs.size());
      tree.dirs.push_back(SourceDir{dir_id, n, rel, mtime_of(st)});
      ancestors.emplace_back(st.st_dev, st.st_ino);
      walk(tree, child, id, ancestors, cancel);
      ancestors.pop_back();
    } else if (S_ISREG(st.st_mode)) {
      if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
        tree.skipped.emplace_back(rel, "larger than 4 GiB");
        continue;
      }
      tree.files.add(dir_id, n);
      tree.bytes += static_cast<uint64_t>(st.st_size);
    } else {
      tree.skipped.emplace_back(rel, "not a regular file or folder");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Per-file preparation (runs on worker threads)

struct PreparedFile {
  uint32_t source_index = 0;
  bool skipped = false;
  std::string note;  // why skipped, or why stored as a blob
  FileKind kind = FileKind::blob;
  uint32_t script = 0;  // jpeg: scan script; l3: codec::shape_code
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;  // the source's, when it was read
  // jpeg: the transcoded stream and its cuts; other kinds: the whole payload in `payload`.
  codec::ProgressiveJpeg jpeg;
  std::vector<uint8_t> payload;

  uint64_t full_bytes() const { return kind == FileKind::jpeg ? jpeg.bytes.size() : payload.size(); }
};

bool read_whole(const fsys::path& p, std::vector<uint8_t>& out, int64_t& mtime_ns, std::string& error) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("cannot open: {}", std::strerror(errno));
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    error = "cannot stat or larger than 4 GiB";
    ::close(fd);
    return false;
  }
  mtime_ns = mtime_of(st);
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (true) {
    if (done == out.size()) out.resize(out.size() + 65536);  // the file may have grown
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = fmt::format("read failed: {}", std::strerror(errno));
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  ::close(fd);
  return true;
}

// Makes `out` an l3 file holding the L3 payload of a lossless source; `out` is unchanged on failure.
fid::Status prepare_l3(std::span<const uint8_t> bytes, PreparedFile& out) {
  fid::Result<codec::SourceImage> img = codec::decode_image(bytes);
  if (!img) return std::move(img).error();
  fid::Result<std::vector<uint8_t>> payload = codec::encode_l3_payload(*img);
  if (!payload) return std::move(payload).error();
  fid::Result<codec::L3Payload> parsed = codec::parse_l3_payload(*payload);  // as a reader will see it
  if (!parsed) return std::move(parsed).error();
  out.kind = FileKind::l3;
  out.script = codec::shape_code(parsed->shape);
  out.width = img->image.width;
  out.height = img->image.height;
  out.payload = std::move(payload).value();
  return {};
}

PreparedFile prepare(const fsys::path& path, uint32_t index, codec::LevelScripts levels) {
  PreparedFile out;
  out.source_index = index;
  std::vector<uint8_t> bytes;
  std::string error;
  if (!read_whole(path, bytes, out.mtime_ns, error)) {
    out.skipped = true;
    out.note = error;
    return out;
  }
  out.source_size = bytes.size();
  if (codec::looks_like_jpeg(bytes)) {
    fid::Result<codec::ProgressiveJpeg> transcoded = codec::transcode_progressive(bytes, levels);
    if (transcoded) {
      out.kind = FileKind::jpeg;
      out.script = static_cast<uint8_t>(transcoded->script);
      out.width = static_cast<uint32_t>(transcoded->width);
      out.height = static_cast<uint32_t>(transcoded->height);
      out.jpeg = std::move(transcoded).value();
      return out;
    }
    out.note = "JPEG not transcodable, stored byte-identical: " + transcoded.error().message;
  } else if (codec::sniff_image(bytes) != codec::SourceFormat::unknown) {
    fid::Status stored = prepare_l3(bytes, out);
    if (stored) return out;
    out.note = "lossless image not storable as L3, stored byte-identical: " + stored.error().message;
  }
  out.kind = FileKind::blob;
  out.payload = std::move(bytes);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Records

// A file's row of the index, complete once its record is written.
struct StoredFile {
  uint32_t source_index = 0;
  FileKind kind = FileKind::blob;
  uint32_t script = 0;
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;
  uint32_t record = 0, slot = 0;
  std::vector<Piece> pieces;
  std::string note;
};

struct RecordInfo {
  std::string path;
  RecordLayout layout = RecordLayout::scan;
  uint64_t size = 0;
  std::vector<uint64_t> region_ends;
};

class RecordBuilder {
 public:
  RecordBuilder(RecordLayout layout) : layout_(layout), regions_(layout == RecordLayout::scan ? kLevels + 1 : 1) {}

  bool empty() const { return members_.empty(); }
  bool full(const PackOptions& opt) const { return bytes_ >= opt.record_bytes || members_.size() >= opt.record_files; }
  RecordLayout layout() const { return layout_; }

  void add(PreparedFile& f) {
    Member m;
    m.file = StoredFile{f.source_index, f.kind, f.script, f.width, f.height, f.source_size, f.mtime_ns, 0, 0, {}, f.note};
    if (layout_ == RecordLayout::scan) {
      for (int i = 0; i <= kLevels; ++i) m.pieces.push_back(append(i, f.jpeg.piece(i)));
    } else {
      m.pieces.push_back(append(0, f.payload));
    }
    bytes_ += f.full_bytes();
    members_.push_back(std::move(m));
  }

  // Writes the record file and completes its members' rows (record, slot, pieces).
  fid::Result<RecordInfo> write(const fsys::path& store_tmp, uint32_t id) {
    RecordInfo info;
    info.layout = layout_;
    info.path = fmt::format("{}/{:06d}.rec", kRecordDir, id);
    std::vector<uint64_t> region_start;
    uint64_t pos = kRecordHeaderSize;
    for (auto& r : regions_) {
      region_start.push_back(pos);
      pos += r.size();
      info.region_ends.push_back(pos);
    }
    info.size = pos;
    fsys::path p = store_tmp / info.path;
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      return system_error(err, fmt::format("{}: cannot create", p.string()));
    }
    auto header = record_header(id, layout_);
    bool ok = write_all(fd, header.data(), header.size());
    for (auto& r : regions_) ok = ok && write_all(fd, r.data(), r.size());
    ok = ok && ::fdatasync(fd) == 0;
    int err = errno;
    ::close(fd);
    if (!ok) return system_error(err, fmt::format("{}: write failed", p.string()));
    uint32_t slot = 0;
    for (Member& m : members_) {
      m.file.record = id;
      m.file.slot = slot++;
      for (LocalPiece& lp : m.pieces)
        m.file.pieces.push_back(Piece{region_start[lp.region] + lp.offset, lp.size, lp.checksum});
    }
    return info;
  }

  // The rows of the files of the record, in slot order, once write() has succeeded.
  template <typename Fn>
  void for_each_file(Fn&& fn) const {
    for (const Member& m : members_) fn(m.file);
  }

 private:
  struct LocalPiece {
    int region;
    uint64_t offset;
    uint32_t size;
    uint32_t checksum;
  };
  struct Member {
    StoredFile file;
    std::vector<LocalPiece> pieces;
  };

  LocalPiece append(int region, std::span<const uint8_t> bytes) {
    auto& r = regions_[static_cast<size_t>(region)];
    LocalPiece lp{region, r.size(), static_cast<uint32_t>(bytes.size()), piece_checksum(bytes)};
    r.insert(r.end(), bytes.begin(), bytes.end());
    return lp;
  }

  static bool write_all(int fd, const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  RecordLayout layout_;
  std::vector<std::vector<uint8_t>> regions_;
  std::vector<Member> members_;
  uint64_t bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Ordered parallel map: workers prepare files in storage order, at most `window` ahead of the
// writer, so memory stays bounded whatever the tree size.

class OrderedPipeline {
 public:
  OrderedPipeline(const SourceTree& tree, const std::vector<uint32_t>& order, unsigned jobs,
                  codec::LevelScripts levels, const std::atomic<bool>& cancel)
      : tree_(tree), order_(order), levels_(levels), window_(std::max<size_t>(4, 4 * static_cast<size_t>(jobs))),
        slots_(window_), cancel_(cancel) {
    for (unsigned i = 0; i < jobs; ++i) workers_.emplace_back([this] { work(); });
  }
  ~OrderedPipeline() { stop(); }

  // The next file in storage order, or nullopt once cancelled.
  std::optional<PreparedFile> next() {
    std::unique_lock lock(mu_);
    auto& slot = slots_[consumed_ % window_];
    // Polls: `cancel` is set from a signal handler, which cannot notify a condition variable.
    while (!ready_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return slot.has_value() || cancel_.load(); })) {
    }
    if (!slot.has_value()) return std::nullopt;
    std::optional<PreparedFile> out = std::move(slot);
    slot.reset();
    ++consumed_;
    space_cv_.notify_all();
    return out;
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    space_cv_.notify_all();
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    while (true) {
      size_t pos;
      {
        std::unique_lock lock(mu_);
        space_cv_.wait(lock, [&] { return stopping_ || cancel_ || claimed_ >= order_.size() || claimed_ < consumed_ + window_; });
        if (stopping_ || cancel_ || claimed_ >= order_.size()) return;
        pos = claimed_++;
      }
      uint32_t idx = order_[pos];
      PreparedFile f;
      try {
        f = prepare(tree_.abs(idx), idx, levels_);
      } catch (const std::exception& e) {  // e.g. bad_alloc on a huge file: skip it, keep the rest
        f = PreparedFile{};
        f.source_index = idx;
        f.skipped = true;
        f.note = std::string("cannot be packed: ") + e.what();
      }
      {
        std::lock_guard lock(mu_);
        slots_[pos % window_] = std::move(f);
      }
      ready_cv_.notify_all();
    }
  }

  const SourceTree& tree_;
  const std::vector<uint32_t>& order_;
  const codec::LevelScripts levels_;
  const size_t window_;
  std::vector<std::optional<PreparedFile>> slots_;
  const std::atomic<bool>& cancel_;
  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  size_t claimed_ = 0, consumed_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// ---------------------------------------------------------------------------------------------
// Index

// The index, written as records complete so that no file's row stays in memory past its record:
// each stored file's row goes to a scratch table keyed by its source index; finish() writes the
// index with those rows in source order, numbered 0..n-1 (a skipped file leaves no gap).
class IndexWriter {
 public:
  explicit IndexWriter(const fsys::path& scratch) : scratch_(scratch.string(), /*writable=*/true) {
    // A small page cache: the table is written in random order, its pages stay in the kernel's.
    scratch_.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384;");
    scratch_.exec(
        "CREATE TABLE rows(src INTEGER PRIMARY KEY, kind INTEGER NOT NULL, script INTEGER NOT NULL, "
        "record INTEGER NOT NULL, slot INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL, "
        "source_size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, pieces BLOB NOT NULL, note TEXT NOT NULL)");
    scratch_.exec("BEGIN");
    insert_.emplace(scratch_, "INSERT INTO rows VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  }

  void add(const StoredFile& f) {
    SqliteStatement& st = *insert_;
    st.bind(1, static_cast<int64_t>(f.source_index));
    st.bind(2, static_cast<int64_t>(f.kind));
    st.bind(3, static_cast<int64_t>(f.script));
    st.bind(4, static_cast<int64_t>(f.record));
    st.bind(5, static_cast<int64_t>(f.slot));
    st.bind(6, static_cast<int64_t>(f.width));
    st.bind(7, static_cast<int64_t>(f.height));
    st.bind(8, static_cast<int64_t>(f.source_size));
    st.bind(9, f.mtime_ns);
    st.bind_blob(10, encode_pieces(f.pieces));
    st.bind(11, std::string_view(f.note));
    st.run();
  }

  // Writes the complete index at `path` (docs/FORMAT.md). The scratch file is the caller's to
  // remove once this writer is gone.
  void finish(const fsys::path& path, const PackOptions& opt, const SourceTree& tree,
              const std::vector<RecordInfo>& records) {
    insert_.reset();
    scratch_.exec("COMMIT");
    SqliteDb db(path.string(), /*writable=*/true);
    db.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;");
    db.exec(kSchema);
    db.exec("BEGIN");
    {
      auto st = db.prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
      auto put = [&](std::string_view k, const std::string& v) {
        st.bind(1, k);
        st.bind(2, std::string_view(v));
        st.run();
      };
      put("format_version", std::to_string(kFormatVersion));
      put("levels", std::to_string(kLevels));
      put("seed", std::to_string(opt.seed));
      put("record_bytes", std::to_string(opt.record_bytes));
      put("created_unix", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch()).count()));
    }
    {
      auto st = db.prepare("INSERT INTO dirs(id, parent, name, mtime_ns) VALUES (?1, ?2, ?3, ?4)");
      for (size_t i = 0; i < tree.dirs.size(); ++i) {
        const SourceDir& d = tree.dirs[i];
        st.bind(1, static_cast<int64_t>(i));
        st.bind(2, static_cast<int64_t>(d.parent));
        st.bind_blob(3, {reinterpret_cast<const uint8_t*>(d.name.data()), d.name.size()});
        st.bind(4, d.mtime_ns);
        st.run();
      }
    }
    {
      auto st = db.prepare("INSERT INTO records(id, path, layout, size, region_ends) VALUES (?1, ?2, ?3, ?4, ?5)");
      for (size_t i = 0; i < records.size(); ++i) {
        const RecordInfo& r = records[i];
        st.bind(1, static_cast<int64_t>(i));
        st.bind(2, std::string_view(r.path));
        st.bind(3, static_cast<int64_t>(r.layout));
        st.bind(4, static_cast<int64_t>(r.size));
        st.bind_blob(5, encode_u64s(r.region_ends));
        st.run();
      }
    }
    {
      auto st = db.prepare(
          "INSERT INTO files(id, dir, name, kind, script, record, slot, width, height, source_size, mtime_ns, "
          "pieces, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)");
      auto rows = scratch_.prepare(
          "SELECT src, kind, script, record, slot, width, height, source_size, mtime_ns, pieces, note "
          "FROM rows ORDER BY src");
      for (int64_t id = 0; rows.step(); ++id) {
        const auto src = static_cast<uint32_t>(rows.integer(0));
        const std::string_view name = tree.files.name(src);
        st.bind(1, id);
        st.bind(2, static_cast<int64_t>(tree.files.dir(src)));
        st.bind_blob(3, {reinterpret_cast<const uint8_t*>(name.data()), name.size()});
        for (int c = 1; c <= 8; ++c) st.bind(c + 3, rows.integer(c));  // kind .. mtime_ns
        st.bind_blob(12, rows.blob(9));
        const std::string note = rows.text(10);
        st.bind(13, std::string_view(note));
        st.run();
      }
    }
    {
      auto st = db.prepare("INSERT INTO skipped(path, reason) VALUES (?1, ?2)");
      for (auto& [p, why] : tree.skipped) {
        st.bind_blob(1, {reinterpret_cast<const uint8_t*>(p.data()), p.size()});
        st.bind(2, std::string_view(why));
        st.run();
      }
    }
    db.exec("COMMIT");
  }

 private:
  SqliteDb scratch_;
  std::optional<SqliteStatement> insert_;
};

// Flushes a file or folder to storage; a failure (EIO, ENOSPC on delayed allocation) fails the
// pack: the store must not be committed on top of data that may not be there.
fid::Status fsync_path(const fsys::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot open to flush", p.string()));
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return system_error(err, fmt::format("{}: flush to storage failed", p.string()));
  return {};
}

// The temporary store: removed unless it was committed (renamed into place). While the pack runs
// it holds an exclusive flock(2) on the folder, so another pack of the same target can tell a
// running pack's folder (locked) from the leftover of a killed one (unlocked).
struct TempStore {
  fsys::path path;
  int lock_fd = -1;
  bool committed = false;
  ~TempStore() {
    if (!committed && !path.empty()) {
      std::error_code ec;
      fsys::remove_all(path, ec);
    }
    if (lock_fd >= 0) ::close(lock_fd);
  }
};

// Temporary folders of earlier packs of the same target: a leftover whose lock is free (its pack
// was killed, or crashed) is removed; a locked one belongs to a pack that runs now, which is an
// error. Without flock support (some network filesystems) a leftover is removed when the PID in
// its name no longer runs.
fid::Status clear_leftovers(const fsys::path& store, const std::string& tmp_prefix) {
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(store.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(tmp_prefix, 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + tmp_prefix.size(), &end, 10);
    if (!end || *end != '\0' || pid <= 0) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    bool stale;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) stale = true;
    else if (errno == EWOULDBLOCK) stale = false;
    else stale = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (stale) {
      fsys::remove_all(e.path(), ec);
      ::close(fd);
      continue;
    }
    ::close(fd);
    return fid::Error{EBUSY, fmt::format("{}: another fidelityfs pack (pid {}) is writing this store into {}; wait "
                                         "for it to finish or stop it, then pack again",
                                         store.string(), pid, e.path().string())};
  }
  return {};
}

}  // namespace

__extension__ typedef unsigned __int128 uint128;

std::vector<uint32_t> storage_permutation(uint32_t n, uint64_t seed) {
  std::vector<uint32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  auto splitmix64 = [&] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (uint32_t i = n; i > 1; --i) {
    // j uniform in [0, i): high half of a 64x64-bit product (Lemire), no modulo bias worth naming.
    auto j = static_cast<uint32_t>((static_cast<uint128>(splitmix64()) * i) >> 64);
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

fid::Result<fsys::path> check_pack_options(const PackOptions& opt) {
  std::error_code ec;
  if (!fsys::is_directory(opt.source, ec))
    return fid::Error{ENOTDIR, fmt::format("{}: source is not a folder", opt.source.string())};
  if (opt.record_bytes < 4096) return fid::Error{EINVAL, "--record-bytes must be at least 4096"};
  if (opt.record_files < 1) return fid::Error{EINVAL, "a record must be allowed at least one file"};
  fsys::path store = fsys::absolute(opt.store, ec);
  if (store.filename().empty()) store = store.parent_path();
  if (fsys::exists(store, ec) && !(fsys::is_directory(store, ec) && fsys::is_empty(store, ec)))
    return fid::Error{EEXIST, fmt::format("{}: already exists and is not an empty folder", store.string())};
  fsys::path source_abs = fsys::canonical(opt.source, ec);
  if (!ec && (store == source_abs || store.string().rfind(source_abs.string() + "/", 0) == 0))
    return fid::Error{EINVAL, fmt::format("{}: the store must not be inside the source folder", store.string())};
  if (!fsys::is_directory(store.parent_path(), ec))
    return fid::Error{ENOENT, fmt::format("{}: parent folder does not exist", store.parent_path().string())};
  return store;
}

fid::Result<PackReport> pack(const PackOptions& opt, const std::function<void(const PackProgress&)>& progress,
                             const std::atomic<bool>& cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  PackReport report;

  fid::Result<fsys::path> checked = check_pack_options(opt);
  if (!checked) return std::move(checked).error();
  const fsys::path store = std::move(checked).value();

  const std::string tmp_prefix = fmt::format(".{}.tmp-", store.filename().string());
  if (fid::Status cleared = clear_leftovers(store, tmp_prefix); !cleared) return std::move(cleared).error();
  TempStore tmp;
  tmp.path = store.parent_path() / fmt::format("{}{}", tmp_prefix, ::getpid());
  std::error_code ec;
  fsys::remove_all(tmp.path, ec);
  if (!fsys::create_directories(tmp.path / kRecordDir, ec))
    return fid::Error{ec ? ec.value() : EEXIST, fmt::format("{}: cannot create: {}", tmp.path.string(), ec.message())};
  tmp.lock_fd = ::open(tmp.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tmp.lock_fd >= 0) (void)::flock(tmp.lock_fd, LOCK_EX | LOCK_NB);  // best effort (see clear_leftovers)

  // 1. Walk.
  SourceTree tree;
  {
    struct stat st {};
    ::stat(opt.source.c_str(), &st);
    tree.root = opt.source;
    tree.dirs.push_back(SourceDir{0, "", "", mtime_of(st)});
    std::vector<std::pair<dev_t, ino_t>> ancestors{{st.st_dev, st.st_ino}};
    walk(tree, opt.source, 0, ancestors, cancel);
  }
  if (cancel) return interrupted();
  const uint32_t n = tree.files.size();
  PackProgress prog;
  prog.files_total = n;
  prog.source_bytes_total = tree.bytes;

  // 2. Prepare in parallel, in storage order; 3. lay out records as files arrive, and send the
  // rows of a record's files to the index once it is written.
  // The index is written under another name and renamed once complete and flushed: a folder
  // that has an index.sqlite has all of it and all its (already flushed) records.
  const fsys::path partial = tmp.path / kIndexPartialFile;
  const fsys::path scratch = tmp.path / kIndexScratchFile;
  auto index_error = [](const StoreError& e) { return fid::Error{EIO, fmt::format("cannot write the index: {}", e.what())}; };
  std::optional<IndexWriter> index;
  try {
    index.emplace(scratch);
  } catch (const StoreError& e) {
    return index_error(e);
  }
  std::vector<RecordInfo> records;
  RecordBuilder scan_rec(RecordLayout::scan), whole_rec(RecordLayout::whole);
  auto flush = [&](RecordBuilder& b) -> fid::Status {
    if (b.empty()) return {};
    fid::Result<RecordInfo> written = b.write(tmp.path, static_cast<uint32_t>(records.size()));
    if (!written) return std::move(written).error();
    records.push_back(std::move(written).value());
    try {
      b.for_each_file([&](const StoredFile& f) { index->add(f); });
    } catch (const StoreError& e) {
      return index_error(e);
    }
    b = RecordBuilder(b.layout());
    return {};
  };
  report.bytes_by_level.assign(kLevels, 0);
  unsigned jobs = opt.jobs ? opt.jobs : std::max(1u, std::thread::hardware_concurrency());
  {
    std::vector<uint32_t> order = storage_permutation(n, opt.seed);
    OrderedPipeline pipeline(tree, order, jobs, opt.levels, cancel);
    auto last_report = std::chrono::steady_clock::now();
    for (uint32_t pos = 0; pos < n; ++pos) {
      std::optional<PreparedFile> f = pipeline.next();
      if (!f) return interrupted();
      prog.files_done++;
      prog.source_bytes_done += f->source_size;
      if (f->skipped) {
        tree.skipped.emplace_back(tree.rel(f->source_index), f->note);
      } else {
        if (f->kind == FileKind::jpeg) {
          report.jpeg++;
          const uint64_t trailer = level_trailer(FileKind::jpeg).size();
          for (int k = 1; k <= kLevels; ++k)
            report.bytes_by_level[static_cast<size_t>(k - 1)] += f->jpeg.piece_end[k] + trailer;
        } else if (f->kind == FileKind::l3) {
          report.l3++;
          report.l3_bytes += f->payload.size();
          report.l3_source_bytes += f->source_size;
        } else {
          report.blob++;
          if (!f->note.empty()) report.blobbed.emplace_back(tree.rel(f->source_index), f->note);
        }
        report.source_bytes += f->source_size;
        RecordBuilder& b = f->kind == FileKind::jpeg ? scan_rec : whole_rec;
        b.add(*f);
        if (b.full(opt)) {
          if (fid::Status flushed = flush(b); !flushed) return std::move(flushed).error();
        }
      }
      auto now = std::chrono::steady_clock::now();
      if (progress && now - last_report > std::chrono::milliseconds(200)) {
        prog.seconds = std::chrono::duration<double>(now - t0).count();
        progress(prog);
        last_report = now;
      }
    }
  }
  for (RecordBuilder* b : {&scan_rec, &whole_rec})
    if (fid::Status flushed = flush(*b); !flushed) return std::move(flushed).error();
  if (cancel) return interrupted();

  // 4. Index: files in tree order (ids follow the sorted walk), skipped ones dropped.
  try {
    index->finish(partial, opt, tree, records);
  } catch (const StoreError& e) {
    return index_error(e);
  }
  index.reset();
  if (::unlink(scratch.c_str()) != 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot remove", scratch.string()));
  }
  if (fid::Status flushed = fsync_path(partial); !flushed) return std::move(flushed).error();
  if (::rename(partial.c_str(), (tmp.path / kIndexFile).c_str()) != 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot rename the index", partial.string()));
  }
  for (const fsys::path& p : {tmp.path / kRecordDir, tmp.path})
    if (fid::Status flushed = fsync_path(p); !flushed) return std::move(flushed).error();

  // 5. Commit: an empty target folder is replaced atomically by rename(2).
  if (::rename(tmp.path.c_str(), store.c_str()) != 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot move the finished store into place", store.string()));
  }
  tmp.committed = true;
  // Committed: the store is complete under its name; a failure to flush the parent folder only
  // means the rename may not survive a power loss, so it does not fail the pack.
  if (int fd = ::open(store.parent_path().c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }

  report.records = records.size();
  report.dirs = tree.dirs.size();
  report.skipped = tree.skipped;
  for (auto& r : records) report.store_bytes += r.size;
  report.store_bytes += fsys::file_size(store / kIndexFile, ec);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) {
    prog.seconds = report.seconds;
    progress(prog);
  }
  return report;
}

}  // namespace fid::index
