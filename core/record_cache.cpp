#include "core/record_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>

#include "common/log.h"

namespace fid::core {

namespace {
constexpr uint64_t kPage = 4096;
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The pieces of record r's files that end inside (from, len) and whose bytes fail their
// checksums, sorted. Pieces ending at or before `from` were checked when that prefix loaded. A
// gathered prefix holds pieces 0..level of each file, at their offsets less the slot's shift.
std::vector<std::pair<uint32_t, uint32_t>> bad_pieces_of(const index::Store& store, const Prefix& pre, uint64_t from) {
  std::vector<std::pair<uint32_t, uint32_t>> bad;
  for (uint32_t id : store.record_files(pre.record)) {
    const index::File& f = store.files()[id];
    auto pieces = store.pieces(f);
    if (!pre.holds(f)) continue;
    const uint64_t shift = pre.gathered() ? pre.shift[f.slot] : 0;
    const uint32_t count = pre.gathered() ? std::min<uint32_t>(f.piece_count, static_cast<uint32_t>(pre.level) + 1) : f.piece_count;
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t at = pieces[i].offset - shift, size = pieces[i].size;
      if (at + size > pre.len || at + size <= from) continue;  // above the level, or checked
      if (index::piece_checksum({pre.data + at, size}) != pieces[i].checksum) bad.emplace_back(id, i);
    }
  }
  std::sort(bad.begin(), bad.end());
  return bad;
}

// Bytes of pieces 0..level of every file of a file record, the length of its gathered prefix.
uint64_t gathered_len(const index::Store& store, uint32_t r, int level) {
  uint64_t total = 0;
  for (uint32_t id : store.record_files(r)) {
    auto pieces = store.pieces(store.files()[id]);
    for (size_t i = 0; i < pieces.size() && i <= static_cast<size_t>(level); ++i) total += pieces[i].size;
  }
  return total;
}
}  // namespace

uint64_t prefix_memory(uint64_t len) { return round_up(std::max<uint64_t>(len, 1), kPage); }

bool Prefix::is_bad(uint32_t file, uint32_t piece) const {
  return !bad_pieces.empty() && std::binary_search(bad_pieces.begin(), bad_pieces.end(), std::pair{file, piece});
}

bool Prefix::touches_bad(uint32_t file) const {
  auto it = std::lower_bound(bad_pieces.begin(), bad_pieces.end(), std::pair<uint32_t, uint32_t>{file, 0});
  return it != bad_pieces.end() && it->first == file;
}

RecordCache::RecordCache(const index::Store& store, storage::RecordSource& source, ReadStats& stats, uint64_t budget)
    : store_(store), source_(source), stats_(stats), budget_(budget) {
  // Every read asks which prefix serves it: a file record's gathered lengths are summed once here,
  // not over its files' pieces at each read.
  if (store.layout() != index::StoreLayout::file) return;
  const size_t per = static_cast<size_t>(store.levels()) + 1;
  gathered_.assign(store.records().size() * per, 0);
  for (const index::Record& rec : store.records())
    if (rec.layout == index::RecordLayout::file)
      for (size_t k = 1; k < per; ++k) gathered_[rec.id * per + k] = gathered_len(store, rec.id, static_cast<int>(k));
}

uint64_t RecordCache::gathered(uint32_t r, int level) const {
  return gathered_[r * (static_cast<size_t>(store_.levels()) + 1) + static_cast<size_t>(level)];
}

RecordCache::~RecordCache() {
  std::lock_guard lock(mu_);
  slots_.clear();  // frees the prefixes (their deleters use used_)
  lru_.clear();
}

size_t RecordCache::entries() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

size_t RecordCache::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

namespace {
// The prefix level of a file record read at `level`, given a function of the gathered length at a
// level. One read of the whole record against a read a file: reading a little over half the
// bytes in many ranges is no gain on a disk whose reads are few (docs/BENCHMARKS.md, "Beyond RAM").
template <typename GatheredLen>
int file_prefix_level(const index::Store& store, uint32_t r, int level, bool gather, GatheredLen len) {
  const int whole = store.levels();
  if (!gather || level >= whole || level <= 0 || len(level) * 2 > store.records()[r].size) return whole;
  return level;
}
}  // namespace

int record_prefix_level(const index::Store& store, uint32_t r, int level, bool gather) {
  switch (store.records()[r].layout) {
    case index::RecordLayout::scan: return level;
    case index::RecordLayout::whole: return 0;
    case index::RecordLayout::file: break;
  }
  return file_prefix_level(store, r, level, gather, [&](int k) { return gathered_len(store, r, k); });
}

const index::ClipRun* RecordCache::run_of(uint32_t r) const {
  const size_t records = store_.records().size();
  return r < records ? nullptr : &store_.clip_runs()[r - records];
}

uint32_t RecordCache::record_of(uint32_t r) const {
  const index::ClipRun* c = run_of(r);
  return c ? c->record : r;
}

int RecordCache::prefix_level(uint32_t r, int level) const {
  if (run_of(r)) return std::clamp(level, 1, store_.levels());
  if (store_.records()[r].layout != index::RecordLayout::file) return record_prefix_level(store_, r, level, false);
  return file_prefix_level(store_, r, level, !source_.keeps_copies(), [&](int k) { return gathered(r, k); });
}

uint64_t RecordCache::prefix_len(uint32_t r, int level) const {
  if (const index::ClipRun* c = run_of(r))
    return c->level_end.empty() ? 0 : c->level_end[static_cast<size_t>(std::clamp(level, 0, store_.levels()))] - c->offset;
  if (store_.records()[r].layout == index::RecordLayout::file && level > 0 && level < store_.levels())
    return gathered(r, level);
  return record_prefix_len(store_, r, level);
}

uint64_t record_prefix_len(const index::Store& store, uint32_t r, int level) {
  const index::Record& rec = store.records()[r];
  if (rec.region_end.empty()) return 0;
  if (rec.layout == index::RecordLayout::file && level > 0 && level < store.levels())
    return gathered_len(store, r, level);
  if (rec.layout != index::RecordLayout::scan || level <= 0) return rec.region_end.back();
  return rec.region_end[std::min<size_t>(static_cast<size_t>(level), rec.region_end.size() - 1)];
}

bool RecordCache::drop_if_damaged_locked(uint32_t r, Slot& s) {
  if (!s.prefix || s.prefix->bad_pieces.empty() || std::chrono::steady_clock::now() < s.prefix->retry_at) return false;
  if (s.in_lru) lru_.erase(s.lru);
  s.in_lru = false;
  s.prefix.reset();  // freed now unless a reader still holds it
  if (s.pending_level < 0 && !s.loading) slots_.erase(r);
  return true;
}

std::shared_ptr<const Prefix> RecordCache::get(uint32_t r, int level, bool wait_for_load) {
  std::unique_lock lock(mu_);
  bool waited = false;
  for (;;) {
    auto it = slots_.find(r);
    if (it == slots_.end()) return nullptr;
    if (drop_if_damaged_locked(r, it->second)) return nullptr;  // the next load fetches it again
    Slot& s = it->second;
    if (s.prefix && s.prefix->level >= level) {
      if (s.in_lru) lru_.splice(lru_.begin(), lru_, s.lru);
      (run_of(r) ? stats_.clip_hits : stats_.cache_hits).fetch_add(1, std::memory_order_relaxed);
      if (s.prefix->by_prefetch) stats_.prefetch_hits.fetch_add(1, std::memory_order_relaxed);
      if (waited) stats_.prefetch_waits.fetch_add(1, std::memory_order_relaxed);
      return s.prefix;
    }
    if (s.pending_level < level || !wait_for_load) return nullptr;
    waited = true;
    ++waiting_;
    cv_.wait(lock);
    --waiting_;
  }
}

std::shared_ptr<const Prefix> RecordCache::peek(uint32_t r, int level) const {
  std::lock_guard lock(mu_);
  auto it = slots_.find(r);
  if (it == slots_.end() || !it->second.prefix || it->second.prefix->level < level || !it->second.prefix->bad_pieces.empty())
    return nullptr;
  return it->second.prefix;
}

bool RecordCache::mark_queued(uint32_t r, int level) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[r];
  if ((s.prefix && s.prefix->level >= level) || s.pending_level >= level) return false;
  s.pending_level = level;
  return true;
}

void RecordCache::unqueue(uint32_t r) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(r);
  if (it == slots_.end() || it->second.loading) return;
  it->second.pending_level = -1;
  if (!it->second.prefix) slots_.erase(it);
  cv_.notify_all();
}

bool RecordCache::reserve_locked(uint64_t len) {
  if (len > budget_) return false;
  while (used_.load() + len > budget_ && !lru_.empty()) {
    uint32_t victim = lru_.back();
    lru_.pop_back();
    auto it = slots_.find(victim);
    if (it != slots_.end()) {
      it->second.in_lru = false;
      it->second.prefix.reset();  // freed now unless a reader still holds it
      if (it->second.pending_level < 0 && !it->second.loading) slots_.erase(it);
    }
    (run_of(victim) ? stats_.clip_evictions : stats_.cache_evictions).fetch_add(1, std::memory_order_relaxed);
  }
  // Bytes of evicted prefixes that readers still hold stay counted until they let go.
  if (used_.load() + len > budget_) return false;
  uint64_t now = used_.fetch_add(len) + len;
  uint64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return true;
}

bool RecordCache::wait_for_room(std::unique_lock<std::mutex>& lock, uint64_t len) {
  if (len > budget_) return false;
  stats_.room_waits.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard room(room_mu_);
      seen = room_made_;  // room made after this ends the wait below; before it, reserve_locked sees it
    }
    if (reserve_locked(len)) return true;
    lock.unlock();
    {
      std::unique_lock room(room_mu_);
      room_cv_.wait(room, [&] { return room_made_ != seen; });
    }
    lock.lock();
  }
}

void RecordCache::release(uint64_t len) {
  used_.fetch_sub(len, std::memory_order_acq_rel);
  room_made();
}

void RecordCache::room_made() {
  {
    std::lock_guard room(room_mu_);
    ++room_made_;
  }
  room_cv_.notify_all();
}

Status RecordCache::fetch(uint32_t r, uint8_t* data, uint64_t from, uint64_t len) {
  if (from == 0) return source_.read_prefix(r, len, data);
  storage::RangeRead tail{r, from, {data + from, len - from}, {}};
  source_.read_ranges({&tail, 1});
  return tail.status;
}

Status RecordCache::gather(uint32_t r, Prefix& p) {
  const auto files = store_.record_files(r);
  const index::Record& rec = store_.records()[r];
  const auto runs = store_.clip_runs().subspan(rec.clip_begin, rec.clip_count);
  p.shift.resize(files.size());
  thread_local std::vector<storage::RangeRead> reads;
  reads.clear();
  uint64_t at = 0;
  const Error misfit{EIO, "record " + rec.path + ": its files do not fit its prefix"};
  size_t next_run = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    if (next_run < runs.size() && runs[next_run].first_slot == k && !runs[next_run].level_end.empty()) {
      // A clip run's frames up to the level: one range.
      const index::ClipRun& c = runs[next_run++];
      const uint64_t bytes = c.level_end[static_cast<size_t>(p.level)] - c.offset;
      if (at + bytes > p.len) return misfit;
      for (uint32_t j = 0; j < c.frames; ++j) p.shift[c.first_slot + j] = c.offset - at;
      if (bytes > 0) reads.push_back({r, c.offset, {p.data + at, bytes}, {}});
      at += bytes;
      k += c.frames - 1;
      continue;
    }
    const index::File& f = store_.files()[files[k]];
    auto pieces = store_.pieces(f);
    uint64_t bytes = 0;
    for (size_t i = 0; i < pieces.size() && i <= static_cast<size_t>(p.level); ++i) bytes += pieces[i].size;
    if (at + bytes > p.len || f.slot >= p.shift.size() || pieces.empty()) return misfit;
    p.shift[f.slot] = pieces[0].offset - at;
    if (bytes > 0) reads.push_back({r, pieces[0].offset, {p.data + at, bytes}, {}});
    at += bytes;
  }
  source_.read_ranges(reads);
  for (const storage::RangeRead& rr : reads)
    if (!rr.status.ok()) return rr.status;
  return {};
}

Status RecordCache::fetch_clip(const index::ClipRun& c, Prefix& p) {
  p.shift.assign(store_.record_files(c.record).size(), Prefix::kNotHeld);
  for (uint32_t j = 0; j < c.frames; ++j) p.shift[c.first_slot + j] = c.offset;
  storage::RangeRead run{c.record, c.offset, {p.data, p.len}, {}};
  source_.read_ranges({&run, 1});
  return run.status;
}

std::unique_ptr<Prefix> RecordCache::read(uint32_t key, int level, uint64_t len, uint64_t alloc, const Prefix* base) {
  const index::ClipRun* run = run_of(key);
  const uint32_t r = record_of(key);
  void* mem = ::mmap(nullptr, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    log_warn("{}: no memory for a {} byte prefix", store_.records()[r].path, alloc);
    return nullptr;
  }
  const auto unmap = [alloc](void* m) { ::munmap(m, alloc); };
  std::unique_ptr<void, decltype(unmap)> mapping(mem, unmap);  // given to the prefix on success
  auto p = std::make_unique<Prefix>();
  p->record = r;
  p->level = level;
  p->len = len;
  p->data = static_cast<uint8_t*>(mem);
  const uint64_t from = base ? base->len : 0;
  if (base) std::memcpy(p->data, base->data, from);
  const bool gathered = store_.records()[r].layout == index::RecordLayout::file && level < store_.levels();
  auto fetch_all = [&] {
    if (run) return fetch_clip(*run, *p);
    return gathered ? gather(r, *p) : fetch(r, p->data, from, len);
  };
  Status st = fetch_all();
  std::vector<std::pair<uint32_t, uint32_t>> bad;
  if (st.ok()) bad = bad_pieces_of(store_, *p, from);
  if (!bad.empty() && source_.drop_cached(r)) {  // damage in a cached copy (disk cache): once more from the origin
    st = fetch_all();
    if (st.ok()) bad = bad_pieces_of(store_, *p, from);
  }
  if (!st.ok()) {
    if (st.error().code != EIO) log_warn("reading {}", st.error().message);
    return nullptr;
  }
  p->bad_pieces = base ? base->bad_pieces : decltype(bad){};
  p->bad_pieces.insert(p->bad_pieces.end(), bad.begin(), bad.end());
  std::sort(p->bad_pieces.begin(), p->bad_pieces.end());
  (void)mapping.release();
  return p;
}

void RecordCache::finish_locked(uint32_t r, std::unique_ptr<Prefix> p, uint64_t alloc, uint64_t fetched,
                                bool by_prefetch) {
  Slot& t = slots_[r];
  t.loading = false;
  t.pending_level = -1;
  cv_.notify_all();
  if (!p) {
    release(alloc);
    if (!t.prefix) slots_.erase(r);
    return;
  }
  p->by_prefetch = by_prefetch;
  if (p->bad_pieces.empty()) {
    damaged_.erase(r);
  } else {  // kept for its good pieces until the back-off passes, then fetched again
    const uint32_t n = std::min<uint32_t>(++damaged_[r], 16);
    p->retry_at = std::chrono::steady_clock::now() + std::min<std::chrono::milliseconds>(damage_backoff_ * (1u << (n - 1)), kMaxDamageBackoff);
  }
  const bool clip = run_of(r) != nullptr;
  (clip ? stats_.clip_loads : stats_.records_read).fetch_add(1, std::memory_order_relaxed);
  (clip ? stats_.clip_bytes : stats_.record_bytes).fetch_add(fetched, std::memory_order_relaxed);
  if (fetched < p->len) stats_.prefix_extensions.fetch_add(1, std::memory_order_relaxed);
  t.prefix = std::shared_ptr<const Prefix>(p.release(), [this, alloc](const Prefix* q) {
    ::munmap(q->data, alloc);
    delete q;
    release(alloc);
  });
  if (t.in_lru) {
    lru_.splice(lru_.begin(), lru_, t.lru);
  } else {
    lru_.push_front(r);
    t.lru = lru_.begin();
    t.in_lru = true;
  }
  room_made();  // evictable now
}

bool RecordCache::load(uint32_t r, int level, bool by_prefetch, WhenFull when_full) {
  std::unique_lock lock(mu_);
  if (auto it = slots_.find(r); it != slots_.end()) (void)drop_if_damaged_locked(r, it->second);
  Slot& s = slots_[r];
  const int lvl = std::max(level, s.pending_level);
  if (s.prefix && s.prefix->level >= lvl) {
    s.pending_level = -1;
    cv_.notify_all();
    return true;
  }
  if (s.loading) return true;
  s.pending_level = lvl;  // keeps the slot out of reserve_locked's reach
  const uint64_t len = prefix_len(r, lvl);
  const uint64_t alloc = prefix_memory(len);
  // A lower level's prefix is extended: held (and counted) until its bytes are copied, so the
  // new prefix is reserved beside it; if both do not fit, it is let go and r read from 0.
  // (A gathered prefix is not a prefix of the next level's: that is read anew.)
  const bool extensible = !run_of(r) && store_.records()[r].layout == index::RecordLayout::scan;
  std::shared_ptr<const Prefix> base = extensible && s.prefix && s.prefix->len < len ? s.prefix : nullptr;
  bool reserved = len > 0 && reserve_locked(alloc);
  if (!reserved && len > 0 && base) {
    base.reset();  // the failed reserve evicted all it could, the slot's reference too: this frees it
    reserved = reserve_locked(alloc);
  }
  if (!reserved && len > 0 && when_full == WhenFull::wait) {
    s.loading = true;  // while mu_ is let go: keeps the slot (unqueue, eviction) and its waiters
    reserved = wait_for_room(lock, alloc);
    s.loading = false;
  }
  if (!reserved) {
    stats_.prefetch_skipped.fetch_add(1, std::memory_order_relaxed);
    auto it = slots_.find(r);  // still there: reserve_locked never erases a pending slot
    it->second.pending_level = -1;
    if (!it->second.prefix) slots_.erase(it);
    cv_.notify_all();
    return false;
  }
  s.loading = true;
  lock.unlock();
  std::unique_ptr<Prefix> p;
  try {
    p = read(r, lvl, len, alloc, base.get());
  } catch (const std::exception& e) {  // out of memory: a failed load, so waiters wake and the budget returns
    log_warn("{}: loading a prefix failed: {}", store_.records()[record_of(r)].path, e.what());
  }
  const uint64_t fetched = len - (base ? base->len : 0);
  log_debug("{}: {} {} to level {} ({} bytes read{}, {})", store_.records()[record_of(r)].path,
            p ? "loaded" : "failed to load", run_of(r) ? "a clip run" : "prefix", lvl,
            fetched, base ? ", extending the level below" : "", by_prefetch ? "prefetch" : "a read");
  base.reset();
  const bool ok = p != nullptr;
  lock.lock();
  finish_locked(r, std::move(p), alloc, fetched, by_prefetch);
  return ok;
}

}  // namespace fid::core
