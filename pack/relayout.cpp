#include "pack/relayout.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <cstring>
#include <fmt/format.h>
#include <memory>

#include "common/fd.h"
#include "common/posix_io.h"
#include "index/format.h"
#include "index/sqlite_db.h"
#include "pack/temp_store.h"

namespace fid::pack {

namespace fsys = std::filesystem;

namespace {

// Records read at once: many reads in flight (io_uring, parallel GETs), memory bounded.
constexpr uint64_t kBatchBytes = 32ull << 20;
constexpr size_t kBatchRecords = 64;

Error damaged(const index::Store& store, uint32_t r, const std::string& why) {
  return Error{EIO, fmt::format("{}: {}", store.records()[r].path, why)};
}

uint64_t page_round(uint64_t len) { return (len + 4095) / 4096 * 4096; }

// Page-aligned memory for a batch of records, mapped with its pages present (one fault-in, not
// one a page) and reused from batch to batch.
class Arena {
 public:
  Arena() = default;
  explicit Arena(uint64_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  Arena(Arena&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Arena& operator=(Arena&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~Arena() {
    if (data_) ::munmap(data_, size_);
  }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return data_ ? size_ : 0; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// A record's bytes without the pieces no file references (format 6): its header and its files'.
uint64_t held_bytes(const index::Store& store, uint32_t r) {
  uint64_t bytes = index::kRecordHeaderSize;
  for (uint32_t id : store.record_files(r))
    for (const index::Piece& p : store.pieces(store.files()[id])) bytes += p.size;
  return bytes;
}

// A store of format 6 leaves its unreferenced pieces behind: its files' and clips' slots become
// the places the loader gave them (0..n-1 in each record), and the table goes.
Status drop_unreferenced(const index::Store& store, index::SqliteDb& db) {
  if (store.format_version() < index::kUnreferencedFormatVersion) return {};
  Result<index::SqliteStatement> file = db.prepare("UPDATE files SET slot = ?1 WHERE id = ?2");
  if (!file) return std::move(file).error();
  for (const index::File& f : store.files()) {
    file->bind(1, static_cast<int64_t>(f.slot));
    file->bind(2, static_cast<int64_t>(f.id));
    if (Status ran = file->run(); !ran) return ran;
  }
  Result<index::SqliteStatement> clip = db.prepare("UPDATE clips SET first_slot = ?1 WHERE id = ?2");
  if (!clip) return std::move(clip).error();
  for (const index::ClipRun& c : store.clip_runs()) {
    clip->bind(1, static_cast<int64_t>(c.first_slot));
    clip->bind(2, static_cast<int64_t>(c.id));
    if (Status ran = clip->run(); !ran) return ran;
  }
  return db.exec("DROP TABLE IF EXISTS unreferenced");
}

// Rewrites the copied index at `to`: the layout, the format version, the records' rows, and the
// slots where unreferenced pieces are dropped.
Status update_index(const index::Store& store, index::StoreLayout layout, const fsys::path& to,
                    const std::vector<std::vector<uint64_t>>& region_ends) {
  Result<std::unique_ptr<index::SqliteDb>> opened = index::SqliteDb::open(to.string(), /*writable=*/true);
  if (!opened) return std::move(opened).error();
  index::SqliteDb& db = **opened;
  if (Status begun = db.exec("BEGIN"); !begun) return begun;
  Result<index::SqliteStatement> meta = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
  if (!meta) return std::move(meta).error();
  auto put = [&](std::string_view key, const std::string& value) {
    meta->bind(1, key);
    meta->bind(2, std::string_view(value));
    return meta->run();
  };
  Status s = put("layout", std::string(index::layout_name(layout)));
  // A store with clips stays format 5 in either layout: the clips table is kept as it is.
  const bool streams = std::any_of(store.videos().begin(), store.videos().end(),
                                   [](const index::VideoSource& v) { return v.is_stream(); });
  const int version = streams                                ? index::kVideoStreamsFormatVersion
                      : !store.clip_runs().empty()            ? index::kClipsFormatVersion
                      : layout == index::StoreLayout::file ? index::kFileLayoutFormatVersion
                                                           : index::kScanLayoutFormatVersion;
  if (s) s = put("format_version", std::to_string(version));
  if (!s) return s;
  Result<index::SqliteStatement> rec =
      db.prepare("UPDATE records SET layout = ?1, region_ends = ?2, size = ?3 WHERE id = ?4");
  if (!rec) return std::move(rec).error();
  const index::RecordLayout jpeg = jpeg_record_layout(layout);
  for (const index::Record& r : store.records()) {
    rec->bind(1, static_cast<int64_t>(r.layout == index::RecordLayout::whole ? r.layout : jpeg));
    rec->bind_blob(2, index::encode_u64s(region_ends[r.id]));
    rec->bind(3, static_cast<int64_t>(region_ends[r.id].back()));
    rec->bind(4, static_cast<int64_t>(r.id));
    if (Status ran = rec->run(); !ran) return ran;
  }
  if (Status dropped = drop_unreferenced(store, db); !dropped) return dropped;
  return db.exec("COMMIT");
}

// The index of the new store: the source's, with the layout, the format version and the JPEG
// records' rows of `layout`.
Status write_index(const index::Store& store, index::StoreLayout layout, const fsys::path& from, const fsys::path& to,
                   const std::vector<std::vector<uint64_t>>& region_ends) {
  std::error_code ec;
  if (!fsys::copy_file(from, to, fsys::copy_options::overwrite_existing, ec))
    return Error{ec.value(), fmt::format("{}: cannot copy the index to {}: {}", from.string(), to.string(), ec.message())};
  Status written = update_index(store, layout, to, region_ends);
  if (!written) return Error{EIO, fmt::format("cannot write the index: {}", written.error().message)};
  return {};
}

// Writes one record file under `dir` (created; flushed later, before the index is published).
Status write_record(const fsys::path& file, std::span<const uint8_t> bytes) {
  std::error_code ec;
  fsys::create_directories(file.parent_path(), ec);
  Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return io_error(errno, file.string());
  return write_loop(fd.get(), bytes.data(), bytes.size(), file.string());
}

// Records read in batches (many reads in flight: io_uring, parallel GETs) by a thread of its own,
// one batch ahead of the one being moved and written, so that reading and writing overlap.
struct Batch {
  std::vector<uint32_t> ids;
  std::vector<uint8_t*> buffers;  // into arena, one a record
  Arena arena;
  Status status;
};

class BatchReader {
 public:
  BatchReader(const index::Store& store, const RelayoutIo& io, const std::atomic<bool>& cancel)
      : store_(store), io_(io), cancel_(cancel), thread_([this] { run(); }) {}
  ~BatchReader() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;

  // A batch the caller is done with: its memory serves a later batch.
  void recycle(Batch&& b) {
    std::lock_guard lock(mu_);
    if (b.arena.size() > spare_.size()) spare_ = std::move(b.arena);
  }

  // The next batch in record order (its status says whether it was read); nullopt after the last.
  std::optional<Batch> next() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || finished_; });
    if (ready_.empty()) return std::nullopt;
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return b;
  }

 private:
  void run() {
    const auto records = store_.records();
    for (uint32_t next = 0; next < records.size() && !cancel_;) {
      Batch b;
      uint64_t bytes = 0;  // the records' sizes, each rounded up to pages (O_DIRECT reads)
      for (; next < records.size() && b.ids.size() < kBatchRecords &&
             (b.ids.empty() || bytes + page_round(records[next].size) <= kBatchBytes);
           ++next) {
        b.ids.push_back(next);
        bytes += page_round(records[next].size);
      }
      {
        std::lock_guard lock(mu_);
        if (spare_.size() >= bytes) b.arena = std::move(spare_);
      }
      if (b.arena.size() < bytes) b.arena = Arena(std::max(bytes, kBatchBytes));
      if (!b.arena.data()) {
        b.status = Error{ENOMEM, fmt::format("{}: no memory for {} bytes of records", records[b.ids[0]].path, bytes)};
      } else {
        uint64_t at = 0;
        for (uint32_t id : b.ids) {
          b.buffers.push_back(b.arena.data() + at);
          at += page_round(records[id].size);
        }
        b.status = io_.read_records(b.ids, b.buffers);
      }
      const bool failed = !b.status;
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.empty(); });  // one batch waits at most
      if (stop_) return;
      ready_.push_back(std::move(b));
      cv_.notify_all();
      if (failed) break;
    }
    std::lock_guard lock(mu_);
    finished_ = true;
    cv_.notify_all();
  }

  const index::Store& store_;
  const RelayoutIo& io_;
  const std::atomic<bool>& cancel_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  Arena spare_;  // the memory of a batch done with
  bool stop_ = false, finished_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

Status check_record(const index::Store& store, uint32_t r, std::span<const uint8_t> in) {
  const index::Record& rec = store.records()[r];
  if (in.size() != rec.size) return damaged(store, r, fmt::format("{} bytes, the index says {}", in.size(), rec.size));
  if (in.size() < index::kRecordHeaderSize || std::memcmp(in.data(), index::kRecordMagic.data(), index::kRecordMagic.size()) != 0 ||
      index::get_le(in.data() + 8, 4) != rec.header_id || in[12] != static_cast<uint8_t>(rec.layout))
    return damaged(store, r, "its header is not the one the index names");
  const std::span<const uint32_t> members = store.record_files(r);
  // Checked before anything is copied: a damaged piece is never carried into the new store.
  for (uint32_t id : members) {
    const index::File& f = store.files()[id];
    const auto pieces = store.pieces(f);
    for (uint32_t i = 0; i < f.piece_count; ++i)
      if (index::piece_checksum(in.subspan(pieces[i].offset, pieces[i].size)) != pieces[i].checksum)
        return damaged(store, r, fmt::format("piece {} of {} fails its checksum", i, store.relative_path(f)));
  }
  return {};
}

Status relayout_record(const index::Store& store, uint32_t r, std::span<const uint8_t> in, index::RecordLayout to,
                       std::vector<uint8_t>& out) {
  if (Status checked = check_record(store, r, in); !checked) return checked;
  const index::Record& rec = store.records()[r];
  const std::span<const uint32_t> members = store.record_files(r);
  if (rec.layout == index::RecordLayout::whole) to = index::RecordLayout::whole;
  const uint64_t held = held_bytes(store, r);  // less than its size where pieces are unreferenced
  out.resize(held);
  const auto header = index::record_header(rec.header_id, to);
  std::memcpy(out.data(), header.data(), header.size());
  if (to == rec.layout && held == in.size()) {
    std::memcpy(out.data() + index::kRecordHeaderSize, in.data() + index::kRecordHeaderSize, in.size() - index::kRecordHeaderSize);
    return {};
  }
  // Region starts in the target layout: scan puts piece i of every file in region i, file puts
  // each file's pieces back to back in one region.
  const size_t pieces_per_file = static_cast<size_t>(store.levels()) + 1;
  std::vector<uint64_t> at(to == index::RecordLayout::scan ? pieces_per_file : 1, index::kRecordHeaderSize);
  if (to == index::RecordLayout::scan) {
    std::vector<uint64_t> region_bytes(pieces_per_file, 0);
    for (uint32_t id : members) {
      const auto pieces = store.pieces(store.files()[id]);
      for (size_t i = 0; i < pieces_per_file; ++i) region_bytes[i] += pieces[i].size;
    }
    for (size_t i = 1; i < pieces_per_file; ++i) at[i] = at[i - 1] + region_bytes[i - 1];
  }
  auto copy = [&](const index::File& f, size_t i) {
    const index::Piece& p = store.pieces(f)[i];
    uint64_t& pos = at[to == index::RecordLayout::scan ? i : 0];
    std::memcpy(out.data() + pos, in.data() + p.offset, p.size);
    pos += p.size;
  };
  // A file record lays each clip run by level (docs/FORMAT.md "Clips"): every frame's piece 0,
  // then every frame's piece 1, ...; a scan record lays clips' frames as any file's.
  const std::span<const index::ClipRun> runs = store.clip_runs().subspan(rec.clip_begin, rec.clip_count);
  size_t next_run = 0;
  for (size_t slot = 0; slot < members.size(); ++slot) {
    if (to == index::RecordLayout::file && next_run < runs.size() && runs[next_run].first_slot == slot) {
      const std::span<const uint32_t> frames = members.subspan(slot, runs[next_run].frames);
      for (size_t i = 0; i < pieces_per_file; ++i)
        for (uint32_t id : frames) copy(store.files()[id], i);
      slot += frames.size() - 1;
      ++next_run;
      continue;
    }
    const index::File& f = store.files()[members[slot]];
    for (size_t i = 0; i < f.piece_count; ++i) copy(f, i);
  }
  return {};
}

Status relayout_allowed(const index::Store& store) {
  const int v = store.format_version();
  if (v >= index::kScanLayoutFormatVersion) return {};
  return Error{EINVAL, fmt::format("{}: format version {}: relayout writes format {} or {} and cannot carry an index of "
                                   "format {} (its pieces are described differently); pack the source again instead",
                                   store.location(), v, index::kScanLayoutFormatVersion,
                                   index::kFileLayoutFormatVersion, v)};
}

Result<RelayoutReport> relayout(const index::Store& store, index::StoreLayout layout, const fsys::path& out, const RelayoutIo& io,
                                const std::function<void(uint64_t, uint64_t)>& progress,
                                const std::atomic<bool>& cancel) {
  if (Status allowed = relayout_allowed(store); !allowed) return std::move(allowed).error();
  const auto t0 = std::chrono::steady_clock::now();
  Result<fsys::path> target = check_store_target(out);
  if (!target) return std::move(target).error();
  Result<std::unique_ptr<TempStore>> tmp = TempStore::begin(*target);
  if (!tmp) return std::move(tmp).error();
  const fsys::path& dir = (*tmp)->path();
  const index::RecordLayout jpeg = jpeg_record_layout(layout);
  const auto records = store.records();
  RelayoutReport report;
  std::vector<std::vector<uint64_t>> region_ends(records.size());
  std::vector<uint8_t> laid_out;
  BatchReader reader(store, io, cancel);
  while (std::optional<Batch> got = reader.next()) {
    if (cancel) return Error{ECANCELED, "interrupted"};
    Batch& b = *got;
    if (!b.status) return std::move(b.status).error();
    for (size_t k = 0; k < b.ids.size(); ++k) {
      const index::Record& rec = records[b.ids[k]];
      const std::span<const uint8_t> in(b.buffers[k], rec.size);
      // A record whose layout stays is written as read, once checked, unless it holds
      // unreferenced pieces (format 6), which are left behind.
      const uint64_t held = held_bytes(store, rec.id);
      const bool same = (rec.layout == index::RecordLayout::whole || rec.layout == jpeg) && held == rec.size;
      Status moved = same ? check_record(store, rec.id, in) : relayout_record(store, rec.id, in, jpeg, laid_out);
      if (!moved) return std::move(moved).error();
      {
        // The region ends the new layout's index row names.
        std::vector<uint64_t>& ends = region_ends[rec.id];
        if (rec.layout == index::RecordLayout::whole || jpeg == index::RecordLayout::file) {
          ends = {held};
        } else {
          ends.assign(static_cast<size_t>(store.levels()) + 1, 0);
          uint64_t pos = index::kRecordHeaderSize;
          for (size_t i = 0; i < ends.size(); ++i) {
            for (uint32_t id : store.record_files(rec.id)) pos += store.pieces(store.files()[id])[i].size;
            ends[i] = pos;
          }
        }
        report.rewritten += rec.layout != index::RecordLayout::whole && rec.layout != jpeg;
      }
      const fsys::path file = dir / rec.path;
      if (Status written = write_record(file, same ? in : std::span<const uint8_t>(laid_out)); !written)
        return std::move(written).error();
      if (io.destination) {
        if (Status sent = io.destination->add_record(file, rec.path); !sent) return std::move(sent).error();
      }
      report.records++;
      report.bytes += held;
      if (progress) progress(report.records, records.size());
    }
    reader.recycle(std::move(b));
  }
  if (cancel) return Error{ECANCELED, "interrupted"};
  // Every record reaches the disk before the index that names them exists (written without a
  // flush each, so that the kernel writes them back while later ones are read).
  if (!io.destination) {
    for (const index::Record& rec : records)
      if (Status flushed = fsync_path(dir / rec.path); !flushed) return std::move(flushed).error();
  }
  if (cancel) return Error{ECANCELED, "interrupted"};
  if (Status indexed = write_index(store, layout, io.index_file, dir / index::kIndexPartialFile, region_ends); !indexed)
    return std::move(indexed).error();
  if (Status published = (*tmp)->publish_index(target->string(), "relayout"); !published) return std::move(published).error();
  if (io.destination) {
    if (Status uploaded = io.destination->finish(dir / index::kIndexFile); !uploaded) return std::move(uploaded).error();
  } else if (Status committed = (*tmp)->commit(*target); !committed) {
    return std::move(committed).error();
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace fid::pack
