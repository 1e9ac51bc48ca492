// Storage reads of record bytes and a cache of record prefixes (level-k bytes of a whole record)
// under a strict byte budget, shared by all FUSE threads and the prefetcher.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <span>
#include <unordered_map>
#include <vector>

#include "index/store.h"

namespace fid::fs {

// Counters for /.fidelity/stats.
struct IoStats {
  std::atomic<uint64_t> storage_bytes{0};     // bytes requested from record files (after alignment)
  std::atomic<uint64_t> storage_reads{0};     // read calls on record files
  std::atomic<uint64_t> records_read{0};      // whole-prefix reads (one read each)
  std::atomic<uint64_t> record_bytes{0};      // bytes of those prefixes
  std::atomic<uint64_t> piece_reads{0};       // pieces read on their own (no cached prefix)
  std::atomic<uint64_t> cache_hits{0};        // file reads served from a cached prefix
  std::atomic<uint64_t> cache_misses{0};      // file reads served from the file's own pieces
  std::atomic<uint64_t> prefetch_hits{0};     // cache hits on prefixes loaded ahead by the prefetcher
  std::atomic<uint64_t> prefetch_waits{0};    // reads that waited for a prefix being loaded
  std::atomic<uint64_t> prefetch_issued{0};   // prefixes queued by the prefetcher
  std::atomic<uint64_t> prefetch_skipped{0};  // prefixes not loaded: the budget was full
  std::atomic<uint64_t> cache_evictions{0};
};

// One piece of a file to read: piece `index` into dst (dst.size() == the piece's size).
struct PieceRead {
  uint32_t index = 0;
  std::span<uint8_t> dst;
};

// Reads record bytes. With O_DIRECT where the record's filesystem supports it: a small read then
// costs its own bytes rounded to 512-byte sectors (not 4 KiB pages plus readahead), and a prefix is
// not kept twice (page cache + our cache). Falls back to buffered reads of the store's descriptor.
// The pieces of one request are read concurrently through io_uring (one ring per thread) when the
// kernel allows it, else one pread after another.
class RecordReader {
 public:
  // use_io_uring = false forces the sequential preads (tests); true uses io_uring if available.
  RecordReader(const index::Store& store, IoStats& stats, bool use_io_uring = true);
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  // True if piece reads go through io_uring (decided once, at construction).
  bool uses_io_uring() const { return uring_; }
  // Whether this kernel/process can set up an io_uring (probed once per process); when it
  // cannot, `why` gets the reason (e.g. "Operation not permitted").
  static bool io_uring_available(std::string* why = nullptr);

  // The pieces of file f in `reads`, checksums verified, issued together. 0, or the -errno
  // (-EIO: unreadable or bad checksum) of the first failing read in `reads` order, whose position
  // in `reads` goes to *failed.
  int read_pieces(const index::File& f, std::span<const PieceRead> reads, size_t* failed = nullptr);
  // One piece: read_pieces with a single read.
  int read_piece(const index::File& f, uint32_t i, std::span<uint8_t> dst);
  // Bytes [0, len) of record r into `buf`, which is page-aligned with room for len rounded up to
  // 4096. 0 or -errno.
  int read_prefix(uint32_t r, uint64_t len, uint8_t* buf);

 private:
  int direct_fd(uint32_t r);
  int pread_all(int fd, uint8_t* dst, uint64_t len, uint64_t off);
  void drop_direct(uint32_t r, int fd);
  const index::Store& store_;
  IoStats& stats_;
  const bool uring_;
  std::unique_ptr<std::atomic<int>[]> dfd_;  // -2: not opened yet, -1: no O_DIRECT
};

// A cached prefix of a record: bytes [0, len) hold every piece its files need up to `level`
// (scan records) or everything (whole records, level 0).
struct Prefix {
  uint32_t record = 0;
  int level = 0;
  uint64_t len = 0;
  uint8_t* data = nullptr;
  bool by_prefetch = false;
  mutable std::atomic<bool> used{false};
};

class RecordCache {
 public:
  RecordCache(const index::Store& store, RecordReader& reader, IoStats& stats, uint64_t budget);
  ~RecordCache();

  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_.load(); }
  uint64_t peak() const { return peak_.load(); }
  size_t entries() const;

  // Bytes of the prefix of record r that covers `level` (0 = whole record).
  uint64_t prefix_len(uint32_t r, int level) const;
  // Prefix level a file at `level` needs from its record (jpeg in a scan record: the level;
  // otherwise 0 = the whole record).
  int level_for(const index::File& f, int level) const;

  // The cached prefix of r covering `level`; waits for one being loaded or queued by the
  // prefetcher. nullptr if there is none (the caller reads the file's own pieces).
  std::shared_ptr<const Prefix> get(uint32_t r, int level);
  // True if a prefix covering `level` is cached, being loaded or queued.
  bool present(uint32_t r, int level);
  // Marks r as queued for loading (so readers wait for it instead of reading pieces). False if
  // it is already present.
  bool mark_queued(uint32_t r, int level);
  // Loads the prefix with one read (the queued mark, if any, is cleared). Returns false if the
  // budget cannot hold it now or the read failed.
  bool load(uint32_t r, int level, bool by_prefetch);
  // Drops a queued mark that will not be loaded (readers waiting on it read their pieces).
  void unqueue(uint32_t r);

 private:
  struct Slot {
    std::shared_ptr<const Prefix> prefix;  // null while loading/queued
    int pending_level = -1;                // >= 0: queued or loading at this level
    bool loading = false;
    std::list<uint32_t>::iterator lru;
    bool in_lru = false;
  };
  // Reserves `len` bytes, evicting least recently used prefixes. Locked.
  bool reserve_locked(uint64_t len);
  void release_bytes(uint64_t len);

  const index::Store& store_;
  RecordReader& reader_;
  IoStats& stats_;
  const uint64_t budget_;
  std::atomic<uint64_t> used_{0}, peak_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint32_t, Slot> slots_;
  std::list<uint32_t> lru_;  // front = most recently used
};

}  // namespace fid::fs
