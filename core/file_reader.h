// The bytes a read of a store file returns. A JPEG or blob at a level is read_range over a
// cached record prefix when there is one (loaded ahead by the prefetcher, or being loaded:
// waited for); else, in random_reads=records mode, over the record's prefix loaded for this read
// (core/random_reads.h); else over storage. An L3 file reads as its decoded view (codec::render_l3_view),
// rendered once into the view cache; with a GPU decoder it is decoded in batches into pinned
// memory. A clip's frame whose record is not loaded is read from its clip run (its frames up to
// the level, one read), loaded into the same cache on the first miss. A JPEG level read sequential (encoding=sequential) is its stored bytes re-encoded as
// one sequential scan with the same pixels (codec::sequential_from_progressive), made when its
// size is first asked for and kept in the view cache (a level with no sequential form of its
// pixels is served progressive, counted and logged once per file; re-encodings in flight hold
// at most `sequential_memory` bytes, a claim that would exceed it waits); its size is remembered (4 bytes a file per
// level in use), so it never changes under an inode even when the bytes must be made again. The
// first failure of each file is logged once, with its cause.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include "codec/l3_batch.h"
#include "codec/l3_view.h"
#include "codec/video_stream.h"
#include "common/error.h"
#include "common/readings.h"
#include "config/config.h"
#include "core/l3_batcher.h"
#include "core/level_policy.h"
#include "core/memory_budget.h"
#include "core/prefetcher.h"
#include "core/record_cache.h"
#include "core/view_cache.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

class FileReader {
 public:
  // `gpu`: the mount's batch decoder for L3 (null: decode on the CPU); `clip_reads`: per file,
  // whether a clip's frame read reads its clip run (null: always). Both must outlive the reader.
  // `video`: the decoder of video streams' GOPs (null: their frames read EIO).
  FileReader(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
             codec::L3BatchDecoder* gpu, const LevelPolicy* clip_reads = nullptr, codec::GopDecoder* video = nullptr);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Bytes in memory and what keeps them there: `data` stays valid while `keep` is held or, where
  // `keep` is null, until this thread's next read; `tail` (static bytes, a JPEG level's trailer)
  // follows it where the pieces are served where they lie, not copied.
  struct Bytes {
    std::span<const uint8_t> data;
    std::shared_ptr<const void> keep;
    std::span<const uint8_t> tail;
    uint64_t size() const { return data.size() + tail.size(); }
    std::vector<uint8_t> to_vector() const {
      std::vector<uint8_t> v(data.begin(), data.end());
      v.insert(v.end(), tail.begin(), tail.end());
      return v;
    }
  };
  // Bytes [offset, offset + length) of file f at `level` (`sequential`: re-encoded as one
  // sequential scan), clipped at its end.
  Result<Bytes> read(const index::File& f, int level, bool sequential, uint64_t offset, uint64_t length);
  // The bytes of f at `level` as stored, all of them, where a cached prefix holds them now (its
  // record's or its clip run's); nullopt otherwise. Loads nothing, waits for nothing, counts no
  // read: what a push to the kernel's page cache sends (core/clip_pushes.h). `data` is valid
  // while `keep` is held and until this thread's next call.
  std::optional<Bytes> cached(const index::File& f, int level);
  // Bytes a read of the whole file returns at `level` as stored (an L3 file: its view's size; a
  // video stream's frame: its view's at the mount's video_short_side).
  uint64_t size(const index::File& f, int level) const;
  // Bytes of JPEG f's level re-encoded sequential: made (and kept in the view cache) on the first
  // call, remembered after. Errors: EINVAL (not a JPEG), or why it could not be made (EIO).
  Result<uint64_t> sequential_size(const index::File& f, int level);
  // The shape an L3 file has (validated when the store was loaded).
  static codec::L3Shape shape_of(const index::File& f);
  codec::ViewFormat view_format() const { return view_format_; }
  uint64_t largest_view() const { return largest_view_; }  // the store's largest L3 view, in bytes

  // Whether reads of records with no cached prefix load the prefix (random_reads=records), and
  // whether the memory cache holds every prefix the mount reads (then a local copy of the source,
  // the disk cache, is read into memory too rather than piece by piece).
  void set_random_reads(bool records, bool memory_holds_all);
  bool random_records() const { return random_records_.load(std::memory_order_relaxed); }

  // A reader took `order`: the prefetcher follows it from now on.
  void follow(const index::OrderParams& order) { prefetch_.follow(order); }
  // Whether reads follow the order the prefetcher was given.
  bool following() const { return prefetch_.following(); }

  const ReadStats& stats() const { return stats_; }
  // The counters and gauges of the reader and its parts (read path, caches, views, prefetch).
  void add_readings(Readings& out) const;
  // The GPU decoder of L3 files and its batches; nullopt without one.
  struct GpuReport {
    std::string decoder;
    uint64_t max_batch_bytes = 0;
    L3Batcher::Stats batches;
    codec::L3DecoderStats decoder_stats;
  };
  std::optional<GpuReport> gpu_report() const;

 private:
  // The cached prefix that serves f at `level` (loaded for this read in random_reads=records
  // mode); null if there is none, or it holds damaged pieces of f (then f's own pieces are read).
  std::shared_ptr<const Prefix> prefix_for(const index::File& f, int level);
  // Clip run c's prefix up to `level`: cached, being loaded by another reader (waited for), or
  // loaded now (one read); null when the cache cannot hold it.
  std::shared_ptr<const Prefix> clip_prefix(const index::ClipRun& c, int level);
  // The stored bytes of f at `level` copied into `out` (read_range from `prefix`, else from storage).
  Status copy_stored(const index::File& f, int level, uint64_t offset, uint64_t length, const Prefix* prefix,
                     std::vector<uint8_t>& out);
  Status read_stored(const index::File& f, int level, uint64_t offset, uint64_t length, std::vector<uint8_t>& out);
  // random_reads=records: loads record r's prefix at prefix level `lvl` for a read, or, if `wait`,
  // waits for the load another reader started (and for a load slot). False when the file's pieces
  // are read instead: the source's local copy holds them and the memory cache could not keep
  // every record anyway; or, without `wait`, another reader is loading it or no slot is free.
  bool load_for_read(uint32_t r, int lvl, bool wait);
  Result<Bytes> read_pieces(const index::File& f, int level, uint64_t offset, uint64_t length);
  Result<Bytes> read_view(const index::File& f, uint64_t offset, uint64_t length);
  // The view of f's level re-encoded sequential, from the view cache or made now.
  Result<ViewCache::View> sequential_view(const index::File& f, int level);
  Result<ViewCache::View> render_sequential(const index::File& f, int level);
  // The remembered size of f's sequential level k (0: not made yet); allocates level k's table.
  std::atomic<uint32_t>& sequential_size_slot(uint32_t file, int level);
  // Decodes an L3 file's payload into a new view.
  Result<ViewCache::View> render(const index::File& f);
  // A video stream's frame (core/video_frames.cpp): its bytes from its GOP's view, which holds
  // every frame of the GOP, each frame_view_size bytes, back to back, rendered as far as readers
  // have asked (a GopView: the GOP's one decode goes on from where the last reader left it).
  struct GopView;
  Result<Bytes> read_frame(const index::File& f, uint64_t offset, uint64_t length);
  uint64_t frame_view_size(const index::File& f) const;
  // Frames of the GOP that starts at file `gop` (its first frame).
  uint32_t gop_frames(const index::File& gop) const;
  // A view of the GOP starting at `gop`, its frames rendered through `through`.
  Result<ViewCache::View> open_gop(const index::File& gop, uint32_t frames, uint32_t through);
  // The GOP view behind `view` (cached under `key`); null if there is none.
  std::shared_ptr<GopView> gop_view(uint64_t key, const ViewCache::View& view);
  // Counts a failed read of f and logs the first one of each file (the Error says so: debug).
  Error failed(const index::File& f, Error e);

  // Files something happened to, so that it is logged once per file.
  class FileSet {
   public:
    bool insert(uint32_t file);  // true the first time
    size_t size() const;

   private:
    mutable std::mutex mu_;
    std::unordered_set<uint32_t> files_;
  };

  const index::Store& store_;
  storage::RecordSource& source_;
  const codec::ViewFormat view_format_;
  ReadStats stats_;
  RecordCache cache_;
  Prefetcher prefetch_;
  ReaderLoads reader_loads_;
  std::atomic<bool> random_records_{false}, memory_holds_all_{false};
  const uint64_t largest_view_;
  ViewCache views_;
  MemoryBudget sequential_memory_;  // what re-encodings in flight hold (sequential_memory)
  codec::L3BatchDecoder* gpu_;
  const LevelPolicy* clip_reads_;
  std::unique_ptr<L3Batcher> batcher_;
  std::atomic<uint64_t> gpu_failures_{0}, failures_{0}, sequential_made_{0}, sequential_fallbacks_{0};
  codec::GopDecoder* video_;
  const uint32_t video_short_side_;
  // GOP views' buffers given back by the views evicted, for the next GOP of the same size: a fresh
  // buffer of a few MB costs a page fault a page on every GOP (a quarter of a decode's CPU).
  struct SpareBuffers;
  static std::shared_ptr<SpareBuffers> make_spare_buffers();
  std::shared_ptr<SpareBuffers> spare_buffers_;
  std::mutex gop_views_mu_;
  std::unordered_map<uint64_t, std::weak_ptr<GopView>> gop_views_;  // by view key, while their views live
  std::atomic<uint64_t> gops_decoded_{0}, frames_decoded_{0};
  // Per level 1..L, the size of each file's sequential re-encoding (0: not made yet); a level's
  // table is allocated on its first use and kept to the end.
  std::unique_ptr<std::atomic<std::atomic<uint32_t>*>[]> sequential_sizes_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> sequential_tables_;  // owns them; under its mutex
  std::mutex sequential_mu_;
  FileSet failed_files_, fallback_files_;
};

}  // namespace fid::core
