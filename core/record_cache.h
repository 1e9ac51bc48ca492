// A cache of record prefixes (the level-k bytes of a whole record, one storage read each) under
// a strict byte budget, shared by the reading threads and the prefetcher. A prefix's pieces are
// checked against their checksums once, when it is loaded; reads from it then only copy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

// Counters of the read path, for /.fidelity/stats.
struct ReadStats {
  std::atomic<uint64_t> records_read{0};      // prefixes loaded (one storage read each)
  std::atomic<uint64_t> record_bytes{0};      // bytes those loads fetched from storage
  std::atomic<uint64_t> prefix_extensions{0};  // loads that fetched only the tail a cached lower level lacked
  std::atomic<uint64_t> piece_reads{0};       // pieces read on their own (no cached prefix)
  std::atomic<uint64_t> cache_hits{0};        // file reads served from a cached prefix
  std::atomic<uint64_t> cache_misses{0};      // file reads served from the file's own pieces
  std::atomic<uint64_t> prefetch_hits{0};     // cache hits on prefixes loaded ahead by the prefetcher
  std::atomic<uint64_t> prefetch_waits{0};    // reads that waited for a prefix being loaded
  std::atomic<uint64_t> prefetch_issued{0};   // prefixes queued by the prefetcher
  std::atomic<uint64_t> prefetch_skipped{0};  // prefixes not loaded: the budget was full (or too small)
  std::atomic<uint64_t> room_waits{0};        // reader loads that waited for room in the budget
  std::atomic<uint64_t> read_loads{0};        // prefixes loaded for a read (random_reads=records)
  std::atomic<uint64_t> local_copy_reads{0};  // reads served piece by piece from the source's local copy
  std::atomic<uint64_t> cache_evictions{0};
  std::atomic<uint64_t> clip_loads{0};      // clip runs loaded (one storage read each)
  std::atomic<uint64_t> clip_bytes{0};      // bytes those loads fetched
  std::atomic<uint64_t> clip_hits{0};       // file reads served from a cached clip run
  std::atomic<uint64_t> clip_evictions{0};  // clip runs evicted
};

// A loaded prefix of a record: bytes [0, len) hold every piece its files need up to `level`
// (scan records: the record's first bytes), everything (whole records, level 0; file records
// read whole, level L), or each file's pieces 0..level gathered back to back in slot order (file
// records below L: `shift`); or a clip run of a file record up to `level` (its files' shift set,
// every other slot's kNotHeld).
struct Prefix {
  uint32_t record = 0;
  int level = 0;
  uint64_t len = 0;
  uint8_t* data = nullptr;
  bool by_prefetch = false;
  // Gathered prefixes: by slot, a piece's offset in the record minus its offset in `data`; empty
  // where the two are equal.
  std::vector<uint64_t> shift;
  static constexpr uint64_t kNotHeld = UINT64_MAX;  // a slot a clip run's prefix does not hold
  // Pieces inside [0, len) that fail their checksums, as (file, piece), sorted. Never served: a
  // read of such a file reads its pieces from the source again.
  std::vector<std::pair<uint32_t, uint32_t>> bad_pieces;
  // A prefix with bad pieces is dropped once this has passed, so that the next load fetches the
  // record again (RecordCache: a back-off that doubles while the damage stays).
  std::chrono::steady_clock::time_point retry_at{};

  bool is_bad(uint32_t file, uint32_t piece) const;
  bool touches_bad(uint32_t file) const;
  bool gathered() const { return !shift.empty(); }
  // Whether the prefix holds f's pieces (a clip run's holds its frames only).
  bool holds(const index::File& f) const { return !gathered() || (f.slot < shift.size() && shift[f.slot] != kNotHeld); }
};

// The prefix level that serves a file of record r read at `level`: the level in a scan record;
// 0, the whole record, in a whole record; in a file record, the level where gathering its files'
// pieces up to it reads at most half the record and `gather` allows it (a source that keeps local
// copies of what it reads, the disk cache, needs whole records), else L, the whole record.
int record_prefix_level(const index::Store& store, uint32_t r, int level, bool gather);
// Bytes of the prefix of record r at prefix level `level`, and the memory a cached prefix of
// `len` bytes takes (whole pages).
uint64_t record_prefix_len(const index::Store& store, uint32_t r, int level);
uint64_t prefix_memory(uint64_t len);

// What a load does when the budget cannot hold its prefix now. The prefetcher's loads are
// skipped. A reader's load waits until loads in flight end and readers let go of the prefixes
// they copy from (every other cached prefix is evicted), so that a record read once is loaded
// once, and reaches the disk cache if the source has one; a prefix larger than the whole budget
// is never loaded. A caller that waits must hold no prefix.
enum class WhenFull { skip, wait };

// The cache holds record prefixes and clip runs' prefixes, each under a key: a record's id, or
// records + a clip run's id (clip_key). Its functions below take keys where they say `r`.
class RecordCache {
 public:
  RecordCache(const index::Store& store, storage::RecordSource& source, ReadStats& stats, uint64_t budget);
  ~RecordCache();
  RecordCache(const RecordCache&) = delete;
  RecordCache& operator=(const RecordCache&) = delete;

  uint64_t budget() const { return budget_; }
  uint64_t used() const { return used_.load(); }
  uint64_t peak() const { return peak_.load(); }
  size_t entries() const;
  // Readers waiting in get() for a load now (what a test waits for before it lets a load finish).
  size_t waiting() const;

  // The key of clip run c's prefix.
  uint32_t clip_key(const index::ClipRun& c) const { return static_cast<uint32_t>(store_.records().size()) + c.id; }
  // The prefix level that serves a file of record r read at `level` (record_prefix_level); `level`
  // for a clip run.
  int prefix_level(uint32_t r, int level) const;
  // Bytes of the prefix of record r at prefix level `level` (0 = whole record).
  uint64_t prefix_len(uint32_t r, int level) const;

  // The cached prefix of r covering `level`; waits for one being loaded or queued (unless
  // wait_for_load is false). nullptr if there is none (the caller reads the file's own pieces).
  std::shared_ptr<const Prefix> get(uint32_t r, int level, bool wait_for_load = true);
  // The cached prefix of r covering `level` if there is one now, undamaged: never waits, counts
  // no hit and leaves the eviction order as it is (a push of its bytes is no read).
  std::shared_ptr<const Prefix> peek(uint32_t r, int level) const;
  // Marks r as queued for loading (so readers wait for it instead of reading pieces). False if
  // a prefix covering `level` is already cached, loading or queued.
  bool mark_queued(uint32_t r, int level);
  // Loads the prefix with one read (the queued mark, if any, is cleared): a prefix of r cached at
  // a lower level is extended, fetching only the bytes it lacks. Returns false if the budget
  // cannot hold it (now, with WhenFull::skip) or the read failed.
  bool load(uint32_t r, int level, bool by_prefetch, WhenFull when_full = WhenFull::skip);
  // Drops a queued mark that will not be loaded (readers waiting on it read their pieces).
  void unqueue(uint32_t r);
  // How long a prefix with damaged pieces is kept before it is fetched again: the first time;
  // doubled with each damaged load of the same record, up to kMaxDamageBackoff.
  static constexpr std::chrono::milliseconds kDamageBackoff{1000}, kMaxDamageBackoff{60000};
  void set_damage_backoff_for_tests(std::chrono::milliseconds first) { damage_backoff_ = first; }

 private:
  struct Slot {
    std::shared_ptr<const Prefix> prefix;  // null while loading/queued
    int pending_level = -1;                // >= 0: queued or loading at this level
    bool loading = false;
    std::list<uint32_t>::iterator lru;
    bool in_lru = false;
  };
  // Drops r's prefix if it has damaged pieces and its back-off has passed (true then). Locked.
  bool drop_if_damaged_locked(uint32_t r, Slot& s);
  // Reserves `len` bytes, evicting least recently used prefixes. Locked.
  bool reserve_locked(uint64_t len);
  // reserve_locked, retried whenever room may have been made, until it succeeds; false if `len`
  // exceeds the budget. `lock` holds mu_; it is let go while waiting.
  bool wait_for_room(std::unique_lock<std::mutex>& lock, uint64_t len);
  // Returns `len` reserved bytes to the budget.
  void release(uint64_t len);
  // Wakes loads waiting for room: bytes were released, or a loaded prefix may now be evicted.
  void room_made();
  // Reads the prefix into fresh memory and checks its pieces; nullptr if the read failed. With
  // `base` (a shorter prefix of r), its bytes and checked pieces are copied and only the rest is
  // read.
  std::unique_ptr<Prefix> read(uint32_t r, int level, uint64_t len, uint64_t alloc, const Prefix* base);
  // Reads bytes [from, len) of record r into data + from: a prefix read from 0, else one range.
  Status fetch(uint32_t r, uint8_t* data, uint64_t from, uint64_t len);
  // Reads each file's pieces 0..level of file record r back to back into p's data (one range a
  // file, all in one batch) and sets p's shift.
  Status gather(uint32_t r, Prefix& p);
  // The clip run that key r stands for, or null for a record's key; the record the key reads.
  const index::ClipRun* run_of(uint32_t r) const;
  uint32_t record_of(uint32_t r) const;
  // Reads clip run c up to p's level into p's data (one range) and sets p's shift.
  Status fetch_clip(const index::ClipRun& c, Prefix& p);
  // Installs a loaded prefix (or clears a failed load). Locked.
  void finish_locked(uint32_t r, std::unique_ptr<Prefix> p, uint64_t alloc, uint64_t fetched, bool by_prefetch);

  const index::Store& store_;
  storage::RecordSource& source_;
  ReadStats& stats_;
  const uint64_t budget_;
  // File records' gathered prefix lengths, [r * (L + 1) + k] for level k (empty in scan stores).
  std::vector<uint64_t> gathered_;
  uint64_t gathered(uint32_t r, int level) const;
  std::atomic<uint64_t> used_{0}, peak_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t waiting_ = 0;  // readers in cv_.wait (mu_)
  std::unordered_map<uint32_t, Slot> slots_;
  std::list<uint32_t> lru_;  // front = most recently used
  std::unordered_map<uint32_t, uint32_t> damaged_;  // record -> damaged loads in a row
  std::chrono::milliseconds damage_backoff_ = kDamageBackoff;
  // Counts room_made calls, so that a load waiting for room misses none. Taken after mu_, never
  // before: bytes are released under mu_ (an evicted prefix freed) and outside it (a reader
  // letting go of an evicted prefix).
  std::mutex room_mu_;
  std::condition_variable room_cv_;
  uint64_t room_made_ = 0;
};

}  // namespace fid::core
