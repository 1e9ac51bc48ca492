#include "core/file_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "codec/jpeg.h"
#include "common/log.h"
#include "core/read_range.h"

namespace fid::core {

namespace {

// The view cache must hold the views readers are in: a view is read in many requests, and one
// evicted between them is rendered again. So it holds twice `threads` of the store's largest L3
// view (a view being rendered for each FUSE thread, and as many whose readers are between two
// requests), up to the record cache's budget; never less than a quarter of that budget
// (sequential re-encodings are kept there too).
uint64_t largest_l3_view(const index::Store& store, codec::ViewFormat format) {
  uint64_t largest = 0;
  for (const index::File& f : store.files())
    if (f.kind == index::FileKind::l3) largest = std::max(largest, codec::l3_view_size(FileReader::shape_of(f), format));
  return largest;
}

// A video stream's GOP view holds its frames at full size (the most a short side leaves them):
// one being decoded must not be evicted by another beside it, or it is decoded again.
uint64_t largest_gop_view(const index::Store& store, codec::ViewFormat format) {
  uint64_t largest = 0;
  for (const index::File& f : store.files())
    if (f.kind == index::FileKind::frame) {
      codec::L3Shape rgb;
      rgb.width = f.width, rgb.height = f.height, rgb.mode = codec::PilMode::RGB;
      largest = std::max(largest, codec::l3_view_size(rgb, format) * (uint64_t{f.script} + 1));
    }
  return largest;
}

uint64_t view_budget(uint64_t largest, const config::Settings& settings) {
  const uint64_t readers_in =
      std::min<uint64_t>((largest + ViewCache::kEntryOverhead) * 2 * settings.threads, settings.cache_bytes);
  return std::max({settings.cache_bytes / 4, readers_in, uint64_t{8} << 20});
}

}  // namespace

FileReader::FileReader(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
                       codec::L3BatchDecoder* gpu, const LevelPolicy* clip_reads, codec::GopDecoder* video)
    : store_(store),
      source_(source),
      view_format_(settings.raw_format),
      cache_(store, source, stats_, settings.cache_bytes),
      // Read-ahead may fill three quarters of the cache: the rest serves what readers hold.
      prefetch_(store, cache_, stats_, settings.cache_bytes / 4 * 3, settings.order_window,
                [&source] { return source.in_flight_target(); }),
      reader_loads_([&source] { return source.in_flight_target(); },
                    source.pieces_while_loading() ? kLocalReaderLoads : kMinLoads),
      largest_view_(largest_l3_view(store, settings.raw_format)),
      views_(view_budget(std::max(largest_view_, largest_gop_view(store, settings.raw_format)), settings)),
      sequential_memory_(config::sequential_memory_budget(settings)),
      gpu_(gpu),
      clip_reads_(clip_reads),
      video_(video),
      video_short_side_(settings.video_short_side),
      spare_buffers_(make_spare_buffers()),
      sequential_sizes_(new std::atomic<std::atomic<uint32_t>*>[static_cast<size_t>(store.levels()) + 1]()) {
  if (!gpu) return;
  L3Batcher::Options o{settings.gpu_batch, std::chrono::microseconds(settings.gpu_deadline_us)};
  batcher_ = std::make_unique<L3Batcher>(*gpu, o, [this](const std::string& why) {
    // A broken device fails every batch: logged the 1st, 10th, 100th... time, not each.
    if (const uint64_t n = count_for_log(gpu_failures_))
      log_error("the GPU decoder failed {} time(s), last: {}; those batches were decoded on the CPU", n, why);
  });
}

FileReader::~FileReader() = default;

codec::L3Shape FileReader::shape_of(const index::File& f) {
  codec::L3Shape s;
  (void)codec::shape_from_code(f.script, f.width, f.height, s);  // checked when the store was loaded
  return s;
}

uint64_t FileReader::size(const index::File& f, int level) const {
  if (f.kind == index::FileKind::l3) return codec::l3_view_size(shape_of(f), view_format_);
  if (f.kind == index::FileKind::frame) return frame_view_size(f);
  return store_.size_at_level(f, level);
}

void FileReader::add_readings(Readings& out) const {
  using K = Reading::Kind;
  const ReadStats& io = stats_;
  out.insert(out.end(), {
      {"eio_errors", K::counter, "fidelityfs_eio_errors_total",
       "reads answered EIO (a piece failed its checksum or could not be read)", failures_.load()},
      {"eio_files", K::gauge, "", "", failed_files_.size()},
      {"records_read", K::counter, "fidelityfs_prefix_loads_total", "record prefixes loaded from the store", io.records_read.load()},
      {"record_bytes", K::counter, "", "", io.record_bytes.load()},
      {"prefix_extensions", K::counter, "", "", io.prefix_extensions.load()},
      {"piece_reads", K::counter, "", "", io.piece_reads.load()},
      {"cache_hits", K::counter, "fidelityfs_cache_hits_total", "file reads served from a cached record prefix", io.cache_hits.load()},
      {"cache_misses", K::counter, "fidelityfs_cache_misses_total", "file reads served from the file's own pieces",
       io.cache_misses.load()},
      {"prefetch_hits", K::counter, "", "", io.prefetch_hits.load()},
      {"prefetch_waits", K::counter, "", "", io.prefetch_waits.load()},
      {"prefetch_issued", K::counter, "", "", io.prefetch_issued.load()},
      {"prefetch_skipped", K::counter, "", "", io.prefetch_skipped.load()},
      {"prefixes_in_flight", K::gauge, "fidelityfs_prefixes_in_flight", "record prefixes being loaded now",
       prefetch_.loading() + reader_loads_.loading()},
      {"l3_views.renders", K::counter, "", "", views_.renders()},
      {"l3_views.hits", K::counter, "", "", views_.hits()},
      {"l3_views.used", K::gauge, "", "", views_.used()},
      {"l3_views.budget", K::gauge, "", "", views_.budget()},
      {"sequential_made", K::counter, "fidelityfs_sequential_made_total",
       "JPEG levels made sequential (encoding=sequential), each making counted", sequential_made_.load()},
      {"sequential_memory.budget", K::gauge, "", "", sequential_memory_.budget()},
      {"sequential_memory.used", K::gauge, "fidelityfs_sequential_memory_bytes",
       "bytes the sequential re-encodings in flight hold", sequential_memory_.used()},
      {"sequential_memory.peak", K::gauge, "", "", sequential_memory_.peak()},
      {"sequential_memory.waits", K::counter, "fidelityfs_sequential_memory_waits_total",
       "re-encodings that waited for room in sequential_memory", sequential_memory_.waits()},
      {"sequential_fallbacks", K::counter, "fidelityfs_sequential_fallbacks_total",
       "JPEG levels served progressive under encoding=sequential: no sequential JPEG codes their pixels",
       sequential_fallbacks_.load()},
      {"cache.budget", K::gauge, "fidelityfs_cache_budget_bytes", "the memory cache's budget (cache=)", cache_.budget()},
      {"cache.used", K::gauge, "fidelityfs_cache_bytes", "bytes of record prefixes in the memory cache", cache_.used()},
      {"cache.peak", K::gauge, "", "", cache_.peak()},
      {"cache.entries", K::gauge, "", "", cache_.entries()},
      {"cache.evictions", K::counter, "fidelityfs_cache_evictions_total", "record prefixes evicted from the memory cache",
       io.cache_evictions.load()},
      {"clips.loads", K::counter, "fidelityfs_clip_loads_total", "clip runs loaded from the store, one read each",
       io.clip_loads.load()},
      {"clips.bytes", K::counter, "", "", io.clip_bytes.load()},
      {"clips.hits", K::counter, "fidelityfs_clip_hits_total", "file reads served from a cached clip run",
       io.clip_hits.load()},
      {"video.gops_decoded", K::counter, "fidelityfs_video_gops_decoded_total",
       "GOPs of video streams decoded (each once, for all its frames)", gops_decoded_.load()},
      {"video.frames_decoded", K::counter, "fidelityfs_video_frames_decoded_total",
       "frames of video streams decoded", frames_decoded_.load()},
      {"clips.evictions", K::counter, "fidelityfs_clip_evictions_total", "clip runs evicted from the memory cache",
       io.clip_evictions.load()},
  });
}

std::optional<FileReader::GpuReport> FileReader::gpu_report() const {
  if (!batcher_) return std::nullopt;
  return GpuReport{gpu_->description(), gpu_->max_batch_bytes(), batcher_->stats(), gpu_->stats()};
}

bool FileReader::FileSet::insert(uint32_t file) {
  std::lock_guard lock(mu_);
  return files_.insert(file).second;
}

size_t FileReader::FileSet::size() const {
  std::lock_guard lock(mu_);
  return files_.size();
}

Error FileReader::failed(const index::File& f, Error e) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  if (failed_files_.insert(f.id))
    log_error("{}: {}; the file returns {}", store_.relative_path(f), e.message, e.code == EIO ? "EIO" : std::strerror(e.code));
  e.log_level = LogLevel::debug;  // logged here, once per file
  return e;
}

Result<FileReader::Bytes> FileReader::read(const index::File& f, int level, bool sequential, uint64_t offset,
                                           uint64_t length) {
  if (offset == 0) prefetch_.on_access(f.id, level);
  if (f.kind == index::FileKind::l3) return read_view(f, offset, length);
  if (f.kind == index::FileKind::frame) return read_frame(f, offset, length);
  if (!sequential) return read_pieces(f, level, offset, length);
  Result<ViewCache::View> v = sequential_view(f, level);
  if (!v) return failed(f, std::move(v).error());
  const uint64_t begin = std::min<uint64_t>(offset, (*v)->size());
  const uint64_t end = begin + std::min<uint64_t>(length, (*v)->size() - begin);
  if (end == (*v)->size()) views_.read_to_end(ViewCache::view_key(f.id, level));
  return Bytes{{(*v)->data() + begin, end - begin}, *v, {}};
}

Result<uint64_t> FileReader::sequential_size(const index::File& f, int level) {
  if (f.kind != index::FileKind::jpeg || level < 1 || level > store_.levels())
    return Error{EINVAL, "only a JPEG level reads sequential"};
  if (const uint32_t known = sequential_size_slot(f.id, level).load(std::memory_order_acquire)) return known;
  Result<ViewCache::View> v = sequential_view(f, level);
  if (!v) return failed(f, std::move(v).error());
  return (*v)->size();
}

std::atomic<uint32_t>& FileReader::sequential_size_slot(uint32_t file, int level) {
  std::atomic<std::atomic<uint32_t>*>& table = sequential_sizes_[static_cast<size_t>(level)];
  std::atomic<uint32_t>* t = table.load(std::memory_order_acquire);
  if (!t) {
    std::lock_guard lock(sequential_mu_);
    t = table.load(std::memory_order_acquire);
    if (!t) {
      sequential_tables_.emplace_back(new std::atomic<uint32_t>[store_.files().size()]());
      t = sequential_tables_.back().get();
      table.store(t, std::memory_order_release);
    }
  }
  return t[file];
}

Result<ViewCache::View> FileReader::sequential_view(const index::File& f, int level) {
  return views_.get(ViewCache::view_key(f.id, level), size(f, level), [&] { return render_sequential(f, level); });
}

Result<ViewCache::View> FileReader::render_sequential(const index::File& f, int level) {
  // What the re-encoding will hold, from the level's header (its piece 0), is claimed first.
  std::vector<uint8_t> stored;  // the progressive level, freed once re-encoded
  const uint64_t level_bytes = store_.size_at_level(f, level);
  if (Status st = read_stored(f, level, 0, store_.pieces(f)[0].size, stored); !st.ok()) return std::move(st).error();
  Result<uint64_t> needs = codec::sequential_memory(stored, level_bytes);
  if (!needs) return Error{EIO, fmt::format("level {} has no valid frame header: {}", level, needs.error().message)};
  const MemoryBudget::Claim claim = sequential_memory_.claim(*needs);
  if (Status st = read_stored(f, level, 0, level_bytes, stored); !st.ok()) return std::move(st).error();
  // Optimized tables: 28% fewer bytes and a 1.3x faster decode than the standard ones, for
  // 0.1-0.25 ms more once per re-encoding (docs/BENCHMARKS.md, "Sequential levels").
  Result<std::vector<uint8_t>> seq = codec::sequential_from_progressive(stored, codec::HuffmanTables::optimized);
  if (!seq && seq.error().code == ENOTSUP) {
    // The progressive level has these very pixels, and every decoder reads it.
    sequential_fallbacks_.fetch_add(1, std::memory_order_relaxed);
    if (fallback_files_.insert(f.id))
      log_info("{}: level {} is served progressive under encoding=sequential: {}", store_.relative_path(f), level,
               seq.error().message);
    seq = std::move(stored);
  }
  if (!seq) return Error{EIO, fmt::format("level {} does not re-encode sequential: {}", level, seq.error().message)};
  if (seq->empty() || seq->size() >= std::numeric_limits<uint32_t>::max())
    return Error{EIO, fmt::format("level {} re-encoded sequential is {} bytes", level, seq->size())};
  const auto size = static_cast<uint32_t>(seq->size());
  uint32_t known = 0;
  // The same bytes give the same re-encoding; a difference would change a size the kernel holds.
  if (!sequential_size_slot(f.id, level).compare_exchange_strong(known, size) && known != size)
    return Error{EIO, fmt::format("level {} re-encoded sequential to {} bytes, {} before", level, size, known)};
  sequential_made_.fetch_add(1, std::memory_order_relaxed);
  // The view owns the re-encoded bytes as they are: no copy.
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(*seq));
  return ViewCache::View(std::make_shared<codec::HostBuffer>(bytes->data(), bytes->size(), [bytes](uint8_t*, size_t) {}));
}

void FileReader::set_random_reads(bool records, bool memory_holds_all) {
  memory_holds_all_.store(memory_holds_all, std::memory_order_relaxed);
  random_records_.store(records, std::memory_order_relaxed);
}

bool FileReader::load_for_read(uint32_t r, int lvl, bool wait) {
  const uint64_t len = cache_.prefix_len(r, lvl);
  if (len == 0) return false;
  if (!memory_holds_all_.load(std::memory_order_relaxed) && source_.local_copy_len(r) >= len) {
    stats_.local_copy_reads.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Queued first, so that other readers of r wait for this load (or read their pieces) instead
  // of starting their own.
  if (!cache_.mark_queued(r, lvl)) return wait;  // cached, loading or queued already
  auto load = [&] {
    if (cache_.load(r, lvl, false, WhenFull::wait)) stats_.read_loads.fetch_add(1, std::memory_order_relaxed);
  };
  if (wait) {
    reader_loads_.run(len, load);
    return true;
  }
  if (reader_loads_.try_run(len, load)) return true;
  cache_.unqueue(r);
  return false;
}

std::optional<FileReader::Bytes> FileReader::cached(const index::File& f, int level) {
  std::shared_ptr<const Prefix> pre = cache_.peek(f.record, cache_.prefix_level(f.record, level));
  if (!pre || !pre->holds(f)) {
    const index::ClipRun* clip = store_.clip_of(f);
    if (clip == nullptr || clip->level_end.empty()) return std::nullopt;
    const uint32_t key = cache_.clip_key(*clip);
    pre = cache_.peek(key, cache_.prefix_level(key, level));
  }
  if (!pre || !pre->holds(f)) return std::nullopt;
  const uint64_t size = store_.size_at_level(f, level);
  const PieceRange range = piece_range(store_, f, level, 0, size);
  if (std::optional<std::span<const uint8_t>> in_prefix = prefix_span(store_, f, range, *pre))
    return Bytes{*in_prefix, pre, range.tail};
  thread_local std::vector<uint8_t> out;
  PrefixPieces pieces(store_, *pre);
  if (!read_range(store_, f, level, 0, size, pieces, out).ok()) return std::nullopt;
  return Bytes{out, pre, {}};
}

std::shared_ptr<const Prefix> FileReader::clip_prefix(const index::ClipRun& c, int level) {
  const uint32_t key = cache_.clip_key(c);
  const int lvl = cache_.prefix_level(key, level);
  // One reader loads the run; the others of the same clip wait for it (or read their pieces if
  // the cache cannot hold it).
  if (cache_.mark_queued(key, lvl)) (void)cache_.load(key, lvl, false, WhenFull::skip);
  return cache_.get(key, lvl);
}

std::shared_ptr<const Prefix> FileReader::prefix_for(const index::File& f, int level) {
  const int lvl = cache_.prefix_level(f.record, level);
  // random_reads=records from a local disk: a reader whose record is being loaded by another, or
  // who finds every load slot taken, reads its own pieces meanwhile, so that the disk serves both.
  const bool wait = !(random_records() && source_.pieces_while_loading());
  std::shared_ptr<const Prefix> pre = cache_.get(f.record, lvl, wait);
  if (!pre && random_records() && load_for_read(f.record, lvl, wait)) pre = cache_.get(f.record, lvl);
  // A clip's frame whose record is not loaded: its clip run up to the level, one read for them all
  // (unless clip_reads is off for it: a loader that takes one frame a clip reads that frame only).
  const index::ClipRun* clip = pre ? nullptr : store_.clip_of(f);
  if (clip && !clip->level_end.empty() && (!clip_reads_ || clip_reads_->effective(f.id) == kClipReadsOn))
    pre = clip_prefix(*clip, level);
  // Damage found when the prefix loaded (a transfer corrupted in flight, a flipped byte): this
  // file's own pieces are read again, so that a fault that has ended is forgotten at once.
  if (pre && pre->touches_bad(f.id)) return nullptr;
  return pre;
}

Status FileReader::copy_stored(const index::File& f, int level, uint64_t offset, uint64_t length, const Prefix* prefix,
                               std::vector<uint8_t>& out) {
  if (prefix) {
    PrefixPieces pieces(store_, *prefix);
    return read_range(store_, f, level, offset, length, pieces, out);
  }
  stats_.cache_misses.fetch_add(1, std::memory_order_relaxed);
  StoredPieces pieces(store_, source_, &stats_);
  return read_range(store_, f, level, offset, length, pieces, out);
}

Status FileReader::read_stored(const index::File& f, int level, uint64_t offset, uint64_t length,
                               std::vector<uint8_t>& out) {
  return copy_stored(f, level, offset, length, prefix_for(f, level).get(), out);
}

// A file's pieces lie back to back in a file record and in its prefixes: the reply is made from
// where they lie (the prefix, or the bounce buffer storage read them into), with the trailer as
// a second part, and nothing is copied on the way.
Result<FileReader::Bytes> FileReader::read_pieces(const index::File& f, int level, uint64_t offset, uint64_t length) {
  std::shared_ptr<const Prefix> pre = prefix_for(f, level);
  const PieceRange range = piece_range(store_, f, level, offset, length);
  if (pre) {
    if (std::optional<std::span<const uint8_t>> in_prefix = prefix_span(store_, f, range, *pre))
      return Bytes{*in_prefix, pre, range.tail};
  } else if (range.back_to_back) {
    stats_.cache_misses.fetch_add(1, std::memory_order_relaxed);
    Result<std::span<const uint8_t>> stored = stored_span(store_, f, range, source_, &stats_);
    if (!stored) return failed(f, std::move(stored).error());
    return Bytes{*stored, nullptr, range.tail};
  }
  thread_local std::vector<uint8_t> out;
  Status st = copy_stored(f, level, offset, length, pre.get(), out);
  if (!st.ok()) return failed(f, std::move(st).error());
  return Bytes{out, nullptr, {}};
}

Result<FileReader::Bytes> FileReader::read_view(const index::File& f, uint64_t offset, uint64_t length) {
  const uint64_t total = size(f, store_.levels());
  const uint64_t begin = std::min(offset, total);
  const uint64_t end = begin + std::min(length, total - begin);
  if (begin == end) return Bytes{};
  Result<ViewCache::View> v = views_.get(ViewCache::view_key(f.id), size(f, 1), [&] { return render(f); });
  if (!v.ok()) return failed(f, std::move(v).error());
  if (end == total) views_.read_to_end(ViewCache::view_key(f.id));
  return Bytes{{(*v)->data() + begin, end - begin}, *v, {}};
}

Result<ViewCache::View> FileReader::render(const index::File& f) {
  std::vector<uint8_t> payload;  // the compressed payload, freed once the view is rendered
  const int L = store_.levels();
  if (Status st = read_stored(f, L, 0, store_.size_at_level(f, L), payload); !st.ok()) return std::move(st).error();
  const uint64_t total = size(f, store_.levels());
  std::shared_ptr<codec::HostBuffer> view = gpu_ ? gpu_->allocate(total) : codec::HostBuffer::heap(total);
  codec::L3DecodeFn decode;
  if (batcher_) decode = [this](std::span<const uint8_t> l3, std::span<uint8_t> px) { return batcher_->decode(l3, px); };
  Result<codec::L3Payload> p = codec::parse_l3_payload(payload);
  Status rendered = p.ok() ? codec::render_l3_view(*p, view_format_, view->span(), decode) : Status(p.error());
  if (!rendered.ok()) return Error{EIO, "the L3 payload does not decode: " + rendered.error().message};
  return ViewCache::View(std::move(view));
}

}  // namespace fid::core
