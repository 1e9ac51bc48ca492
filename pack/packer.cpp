#include "pack/packer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <thread>

#include "index/format.h"
#include "pack/index_writer.h"
#include "pack/ordered_pipeline.h"
#include "pack/record_builder.h"
#include "pack/temp_store.h"
#include "sources/folder_source.h"
#include "sources/tar_source.h"

namespace fid::pack {

namespace fsys = std::filesystem;

fid::Result<bool> sources_are_tars(const std::vector<fsys::path>& sources);

namespace {

constexpr int kLevels = codec::kJpegLevels;
// The rows of the index while the records are written (IndexWriter), inside the temporary folder.
constexpr const char* kIndexScratchFile = "index.scratch";

unsigned pack_jobs(const PackOptions& opt) { return opt.jobs ? opt.jobs : std::max(1u, std::thread::hardware_concurrency()); }

using Clock = std::chrono::steady_clock;

// A pack stopped by `cancel`.
fid::Error interrupted() { return fid::Error{ECANCELED, "interrupted"}; }

// Lays prepared files out in records as they arrive (one builder per layout), writes each record
// when full and sends its files' rows to the index; keeps the report's counts.
class RecordWriter {
 public:
  RecordWriter(const PackOptions& opt, const fsys::path& tmp, sources::SourceTree& tree, IndexWriter& index, PackReport& report,
               PackDestination* destination)
      : opt_(opt), tmp_(tmp), tree_(tree), index_(index), report_(report), destination_(destination) {
    report_.bytes_by_level.assign(kLevels, 0);
    report_.frame_bytes_by_level.assign(kLevels, 0);
    video_dir_.assign(tree.dirs.size(), false);
    for (const index::VideoSource& v : tree.videos) video_dir_[v.dir] = true;
  }

  // `clip`: the clip f is a frame of (an index into `clips`), or StorageOrder::kNoClip.
  fid::Status add(PreparedFile& f, const std::vector<Clip>& clips, uint32_t clip) {
    if (f.skipped) {
      tree_.skipped.emplace_back(tree_.rel(f.source_index), f.note);
      return {};
    }
    count(f);
    // A clip of JPEGs has its runs in the clips table; a video stream's frames (whole records) keep
    // together by the storage order alone, and start a record as a clip does; any other file of a
    // clip is as any blob.
    if (f.kind != index::FileKind::jpeg && f.kind != index::FileKind::frame) clip = StorageOrder::kNoClip;
    RecordBuilder& b = f.kind == index::FileKind::jpeg ? jpeg_ : whole_;
    if (clip != StorageOrder::kNoClip && clip != last_clip_) {
      // A clip that fits in a record starts a record rather than straddle two.
      last_clip_ = clip;
      const uint64_t clip_bytes = clips[clip].bytes;
      if (!b.empty() && clip_bytes <= opt_.record_bytes && b.bytes() + clip_bytes > opt_.record_bytes)
        if (fid::Status flushed = flush(b); !flushed) return flushed;
    }
    const uint32_t run = f.kind == index::FileKind::jpeg ? clip : StorageOrder::kNoClip;  // a clips row
    b.add(f, run, run == StorageOrder::kNoClip ? 0 : clips[run].dir);
    return b.full(opt_.record_bytes, opt_.record_files) ? flush(b) : fid::Status{};
  }

  // Writes the records still open.
  fid::Status finish() {
    for (RecordBuilder* b : {&jpeg_, &whole_})
      if (fid::Status flushed = flush(*b); !flushed) return std::move(flushed).error();
    return {};
  }

  const std::vector<RecordInfo>& records() const { return records_; }

 private:
  void count(const PreparedFile& f) {
    if (f.kind == index::FileKind::jpeg) {
      report_.jpeg++;
      const uint64_t trailer = index::level_trailer(index::FileKind::jpeg).size();
      const bool frame = video_dir_[tree_.files.dir(f.source_index)];
      for (int k = 1; k <= kLevels; ++k) {
        report_.bytes_by_level[static_cast<size_t>(k - 1)] += f.jpeg.piece_end[k] + trailer;
        if (frame) report_.frame_bytes_by_level[static_cast<size_t>(k - 1)] += f.jpeg.piece_end[k] + trailer;
      }
    } else if (f.kind == index::FileKind::l3) {
      report_.l3++;
      report_.l3_bytes += f.payload.size();
      report_.l3_source_bytes += f.source_size;
    } else if (f.kind == index::FileKind::frame) {
      report_.stream_frames++;
    } else {
      report_.blob++;
      if (!f.note.empty()) report_.blobbed.emplace_back(tree_.rel(f.source_index), f.note);
    }
    report_.source_bytes += f.source_size;
  }

  fid::Status flush(RecordBuilder& b) {
    if (b.empty()) return {};
    fid::Result<RecordInfo> written = b.write(tmp_, static_cast<uint32_t>(records_.size()));
    if (!written) return std::move(written).error();
    records_.push_back(std::move(written).value());
    if (destination_)
      if (fid::Status sent = destination_->add_record(tmp_ / records_.back().path, records_.back().path); !sent)
        return sent;
    fid::Status indexed;
    b.for_each_file([&](const StoredFile& f) {
      if (indexed) indexed = index_.add(f);
    });
    b.clear();
    return indexed;
  }

  const PackOptions& opt_;
  const fsys::path& tmp_;
  sources::SourceTree& tree_;
  IndexWriter& index_;
  PackReport& report_;
  PackDestination* const destination_;
  std::vector<RecordInfo> records_;
  RecordBuilder jpeg_{index::jpeg_record_layout(opt_.layout), opt_.record_bytes};
  RecordBuilder whole_{index::RecordLayout::whole, opt_.record_bytes};
  uint32_t last_clip_ = StorageOrder::kNoClip;
  std::vector<bool> video_dir_;  // by dir: a clip folder made from a video
};

// Calls `progress` at most every 200 ms, and once more at the end.
class ProgressTicker {
 public:
  ProgressTicker(const std::function<void(const PackProgress&)>& progress, Clock::time_point t0)
      : progress_(progress), t0_(t0), last_(t0) {}
  PackProgress& counts() { return prog_; }
  void tick() {
    const auto now = Clock::now();
    if (progress_ && now - last_ > std::chrono::milliseconds(200)) report(now);
  }
  void report(Clock::time_point now) {
    last_ = now;
    prog_.seconds = std::chrono::duration<double>(now - t0_).count();
    if (progress_) progress_(prog_);
  }

 private:
  const std::function<void(const PackProgress&)>& progress_;
  Clock::time_point t0_, last_;
  PackProgress prog_;
};

// Prepares the tree's files in parallel, in storage order, and lays them out in records.
// The shard's files only: the storage order (or the stream's) keeps the files for which `in_shard` is
// true.
fid::Status write_records(const PackOptions& opt, sources::PackSource& source, const sources::SourceTree& tree,
                          const std::vector<Clip>& clips, const std::vector<bool>& in_shard, RecordWriter& writer,
                          ProgressTicker& ticker, const std::atomic<bool>& cancel) {
  const uint32_t n = tree.files.size();
  const unsigned jobs = pack_jobs(opt);
  std::optional<std::vector<uint32_t>> streamed = source.stream_order();
  StorageOrder order;
  if (streamed) {
    order.files = std::move(*streamed);
    order.clip_of.assign(order.files.size(), StorageOrder::kNoClip);
  } else {
    order = clip_storage_order(n, clips, opt.seed);
  }
  if (!in_shard.empty()) {
    size_t kept = 0;
    for (size_t pos = 0; pos < order.files.size(); ++pos)
      if (in_shard[order.files[pos]]) {
        order.files[kept] = order.files[pos];
        order.clip_of[kept++] = order.clip_of[pos];
      }
    order.files.resize(kept);
    order.clip_of.resize(kept);
  }
  if (!streamed) source.will_read(order.files);
  OrderedPipeline pipeline(source, tree, order.files, jobs, opt.levels, cancel);
  for (size_t pos = 0; pos < order.files.size(); ++pos) {
    std::optional<PreparedFile> f = pipeline.next();
    if (!f) return interrupted();
    if (f->unread && source.read_errors_fail()) return fid::Error{EIO, f->note};
    ticker.counts().files_done++;
    ticker.counts().source_bytes_done += f->source_size;
    if (fid::Status added = writer.add(*f, clips, order.clip_of[pos]); !added) return std::move(added).error();
    ticker.tick();
  }
  return writer.finish();
}

// Writes the index under another name and renames it once complete and flushed: a folder that
// has an index.sqlite has all of it and all its (already flushed) records.
fid::Status write_index(const PackOptions& opt, TempStore& tmp, std::unique_ptr<IndexWriter> index,
                        const sources::SourceTree& tree, const std::string& digest, const std::vector<RecordInfo>& records) {
  const fsys::path partial = tmp.path() / index::kIndexPartialFile;
  const bool clips = std::any_of(records.begin(), records.end(), [](const RecordInfo& r) { return !r.clips.empty(); });
  const PackMeta meta{opt.seed, opt.record_bytes, shard_text(opt.shard), digest,
                      opt.levels == codec::LevelScripts::fast ? "fast" : "pcr", opt.layout, clips,
                      !tree.frame_place.empty()};
  if (fid::Status done = index->finish(partial, meta, tree, records); !done)
    return std::move(done).error();
  index.reset();
  const fsys::path scratch = tmp.path() / kIndexScratchFile;
  if (::unlink(scratch.c_str()) != 0) {
    const int err = errno;
    return fid::Error{err, fmt::format("{}: cannot remove: {}", scratch.string(), std::strerror(err))};
  }
  return tmp.publish_index(opt.store.string(), "pack");
}


// The files of the shard (by file index; empty for the whole source): a file by its path's hash, a
// clip's frames by their folder's path with a trailing '/' (docs/FORMAT.md). The listing's skipped
// entries outside the shard are dropped, so that the parts' skipped tables add up to a whole pack's.
std::vector<bool> select_shard(const Shard& shard, sources::SourceTree& tree, const std::vector<Clip>& clips) {
  if (shard.count == 1) return {};
  std::erase_if(tree.skipped, [&](const auto& s) { return shard_of(s.first, shard.count) != shard.index; });
  std::vector<bool> in(tree.files.size());
  for (uint32_t i = 0; i < tree.files.size(); ++i) in[i] = shard_of(tree.rel(i), shard.count) == shard.index;
  for (const Clip& c : clips) {
    const bool here = shard_of(tree.dirs[c.dir].rel + "/", shard.count) == shard.index;
    for (uint32_t f : c.frames) in[f] = here;
  }
  return in;
}

}  // namespace

std::unique_ptr<sources::PackSource> local_source(const PackOptions& opt, sources::FolderIds excluded) {
  if (fid::Result<bool> tars = sources_are_tars(opt.sources); tars && *tars)
    return std::make_unique<sources::TarSource>(sources::TarSourceOptions{opt.sources, opt.expand_inner_tars});
  return std::make_unique<sources::FolderSource>(opt.sources[0], std::move(excluded));
}

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

// One folder, or tar files: the source kind, or why the sources are neither.
fid::Result<bool> sources_are_tars(const std::vector<fsys::path>& sources) {
  std::error_code ec;
  if (sources.empty()) return fid::Error{EINVAL, "no source given"};
  if (sources.size() == 1 && fsys::is_directory(sources[0], ec)) return false;
  for (const fsys::path& p : sources) {
    if (fsys::is_directory(p, ec))
      return fid::Error{EINVAL, fmt::format("{}: a folder source must be the only source", p.string())};
    if (!fsys::exists(fsys::symlink_status(p, ec)))
      return fid::Error{ENOENT, fmt::format("{}: no such file or folder", p.string())};
    if (!fsys::is_regular_file(p, ec) || !sources::is_tar_name(p))
      return fid::Error{ENOTDIR, fmt::format("{}: source is not a folder or a tar file (.tar, .tar.gz, .tar.zst, ...)",
                                             p.string())};
  }
  return true;
}

namespace {

// The path with its symlinks resolved, as far as it exists.
fsys::path real_path(const fsys::path& p) {
  std::error_code ec;
  fsys::path real = fsys::weakly_canonical(fsys::absolute(p, ec), ec);
  if (ec) return fsys::absolute(p, ec).lexically_normal();
  return real.filename().empty() ? real.parent_path() : real;
}

}  // namespace

fid::Result<fsys::path> check_pack_options(const PackOptions& opt, const PackIo& io) {
  std::error_code ec;
  fid::Result<bool> tars = io.source ? fid::Result<bool>(true) : sources_are_tars(opt.sources);
  if (!tars) return std::move(tars).error();
  if (opt.record_bytes < 4096) return fid::Error{EINVAL, "--record-bytes must be at least 4096"};
  if (opt.shard.count == 0 || opt.shard.index >= opt.shard.count)
    return fid::Error{EINVAL, fmt::format("--shard '{}': expected I/N with 0 <= I < N", shard_text(opt.shard))};
  if (opt.record_files < 1) return fid::Error{EINVAL, "a record must be allowed at least one file"};
  fid::Result<fsys::path> target = check_store_target(opt.store);
  if (!target) return target;
  if (*tars) return target;
  // Real paths: a store reached through a symlink is the same store.
  const fsys::path source = fsys::canonical(opt.sources[0], ec);
  if (ec) return target;
  const fsys::path store = real_path(opt.writes_into.empty() ? *target : opt.writes_into);
  const auto within = [](const fsys::path& inner, const fsys::path& outer) {
    return inner == outer || inner.string().rfind(outer.string() == "/" ? "/" : outer.string() + "/", 0) == 0;
  };
  if (within(store, source))
    return fid::Error{EINVAL, fmt::format("{}: the store must not be inside the source folder {}", store.string(),
                                          source.string())};
  if (within(source, store))
    return fid::Error{EINVAL, fmt::format("{}: the source folder is inside the store {}", opt.sources[0].string(),
                                          store.string())};
  return target;
}

fid::Result<PackReport> pack(const PackOptions& opt, const std::function<void(const PackProgress&)>& progress,
                             const std::atomic<bool>& cancel) {
  return pack(opt, PackIo{}, progress, cancel);
}

namespace {

fid::Result<PackReport> pack_unguarded(const PackOptions& opt, PackIo io,
                                       const std::function<void(const PackProgress&)>& progress,
                                       const std::atomic<bool>& cancel) {
  const auto t0 = Clock::now();
  fid::Result<fsys::path> checked = check_pack_options(opt, io);
  if (!checked) return std::move(checked).error();
  const fsys::path store = std::move(checked).value();
  fid::Result<std::unique_ptr<TempStore>> tmp = TempStore::begin(store);
  if (!tmp) return std::move(tmp).error();
  const fsys::path& tmp_path = (*tmp)->path();

  PackReport report;
  std::unique_ptr<sources::PackSource> source =
      io.source ? std::move(io.source) : local_source(opt, sources::folder_ids({tmp_path, opt.writes_into.empty() ? store : opt.writes_into}));
  if (opt.video_frames)
    source = sources::video_frames_source(std::move(source), *opt.video_frames, tmp_path, pack_jobs(opt), report.videos);
  else if (opt.video_streams)
    source = sources::video_streams_source(std::move(source), *opt.video_streams, tmp_path, pack_jobs(opt), report.videos);
  fid::Result<sources::SourceTree> listed = source->list(cancel);
  if (!listed) return std::move(listed).error();
  if (cancel) return interrupted();
  sources::SourceTree& tree = *listed;
  if (opt.check_listing)
    if (fid::Status fits = opt.check_listing(tree); !fits) return std::move(fits).error();
  const std::string digest = source_digest(tree);
  std::vector<Clip> clips;
  if (!source->stream_order()) {
    fid::Result<std::vector<Clip>> found = find_clips(tree, *source, opt.clips, cancel);
    if (!found) return std::move(found).error();
    clips = std::move(found).value();
  }
  const std::vector<bool> in_shard = select_shard(opt.shard, tree, clips);
  if (!in_shard.empty()) source->read_only(in_shard);

  fid::Result<std::unique_ptr<IndexWriter>> index = IndexWriter::create(tmp_path / kIndexScratchFile);
  if (!index) return std::move(index).error();
  RecordWriter writer(opt, tmp_path, tree, **index, report, io.destination);
  ProgressTicker ticker(progress, t0);
  ticker.counts().files_total = tree.files.size();
  ticker.counts().source_bytes_total = tree.bytes;
  if (!in_shard.empty()) {
    ticker.counts().files_total = ticker.counts().source_bytes_total = 0;
    for (uint32_t i = 0; i < tree.files.size(); ++i)
      if (in_shard[i]) {
        ticker.counts().files_total++;
        ticker.counts().source_bytes_total += tree.files.listed_size(i);
      }
  }
  if (fid::Status written = write_records(opt, *source, tree, clips, in_shard, writer, ticker, cancel); !written)
    return std::move(written).error();
  for (const Clip& c : clips)
    if (in_shard.empty() || in_shard[c.frames.front()]) ++report.clips, report.clip_frames += c.frames.size();
  if (cancel) return interrupted();
  if (fid::Status indexed = write_index(opt, **tmp, std::move(index).value(), tree, digest, writer.records());
      !indexed)
    return std::move(indexed).error();
  for (auto& r : writer.records()) report.store_bytes += r.size;
  std::error_code ec;
  if (io.destination) {
    report.store_bytes += fsys::file_size(tmp_path / index::kIndexFile, ec);
    if (fid::Status uploaded = io.destination->finish(tmp_path / index::kIndexFile); !uploaded)
      return std::move(uploaded).error();
  } else {
    if (fid::Status committed = (*tmp)->commit(store); !committed) return std::move(committed).error();
    report.store_bytes += fsys::file_size(store / index::kIndexFile, ec);
  }

  report.records = writer.records().size();
  report.dirs = tree.dirs.size();
  report.skipped = tree.skipped;
  const auto end = Clock::now();
  report.seconds = std::chrono::duration<double>(end - t0).count();
  if (progress) ticker.report(end);
  return report;
}

}  // namespace

// The layer's exception boundary: what escapes the steps (out of memory; a library's exception)
// fails the pack like any error, and the temporary store is removed as the stack unwinds.
fid::Result<PackReport> pack(const PackOptions& opt, PackIo io, const std::function<void(const PackProgress&)>& progress,
                             const std::atomic<bool>& cancel) {
  try {
    return pack_unguarded(opt, std::move(io), progress, cancel);
  } catch (const std::bad_alloc&) {
    return fid::Error{ENOMEM, fmt::format("{}: out of memory while packing", opt.store.string())};
  } catch (const std::exception& e) {
    return fid::Error{EIO, fmt::format("{}: {}", opt.store.string(), e.what())};
  }
}

}  // namespace fid::pack
