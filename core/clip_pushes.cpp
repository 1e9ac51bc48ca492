// See clip_pushes.h.
#include "core/clip_pushes.h"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <span>
#include <string>

namespace fid::core {

ClipPushes::ClipPushes(const index::Store& store, const InodeMap& inodes, const Namespace& names, FileReader& reader,
                       const config::Settings& settings)
    : store_(store), inodes_(inodes), names_(names), reader_(reader), max_bytes_(settings.clip_push_bytes) {
  if (settings.clip_push && !store.clip_runs().empty()) {
    states_ = std::make_unique<std::atomic<uint8_t>[]>(store.files().size());
    push_windows_ = std::make_unique<std::atomic<uint64_t>[]>(store.clip_runs().size());
    known_windows_ = std::make_unique<std::atomic<uint64_t>[]>(store.clip_runs().size());
  }
}

ClipPushes::~ClipPushes() { detach(); }

void ClipPushes::attach(KernelCache* kernel) {
  detach();
  if (!states_ || kernel == nullptr) return;
  std::lock_guard lock(mu_);
  kernel_ = kernel;
  stop_ = false;
  for (unsigned i = 0; i < kThreads; ++i) threads_.emplace_back([this] { run(false); });
  threads_.emplace_back([this] { run(true); });
}

void ClipPushes::detach() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    jobs_.clear();
    kernel_ = nullptr;
  }
  wake_.notify_all();
  wake_listing_.notify_all();
  idle_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  {
    std::lock_guard lock(listing_mu_);
    awaited_runs_.clear();  // the queued listings were dropped
    awaited_.store(0, std::memory_order_release);
  }
  listing_cv_.notify_all();
}

int ClipPushes::push_level(uint32_t f) const {
  const Node n = inodes_.decode(names_.live_file_ino(f));
  return n.sequential ? 0 : n.level;
}

ClipPushes::Window ClipPushes::next_window(std::atomic<uint64_t>& slot, uint32_t k, int level, uint32_t first) {
  const Window last = unpack(slot.load(std::memory_order_relaxed));
  // The reader got to the last window's marker, or to where it ended (give or take a frame a push
  // missed).
  const bool on = last.level == level && last.size != 0 &&
                  (k == last.marker() || (k + 1 >= last.end && k <= last.end + 1));
  Window next{0, on ? std::min(2 * last.size, kMaxWindow) : first, level};
  next.end = k + 1 + next.size;
  slot.store(pack(next), std::memory_order_relaxed);
  return next;
}

const index::ClipRun* ClipPushes::read_clip_run(const Node& n, uint64_t offset, bool page_cache) const {
  if (!states_ || !page_cache || offset != 0 || n.type != NodeType::file || n.view != 0 || n.sequential ||
      n.id >= store_.files().size())
    return nullptr;
  return store_.clip_of(store_.files()[n.id]);
}

void ClipPushes::on_read(const Node& n, uint64_t offset, bool page_cache) {
  const index::ClipRun* run = read_clip_run(n, offset, page_cache);
  if (run == nullptr) return;
  const index::File& f = store_.files()[n.id];
  const auto r = static_cast<size_t>(run - store_.clip_runs().data());
  if (awaited_.load(std::memory_order_acquire) != 0) {  // the listing this READ started: its window finds the frames known
    std::unique_lock lock(listing_mu_);
    listing_cv_.wait_for(lock, kListingWait, [&] { return std::find(awaited_runs_.begin(), awaited_runs_.end(), r) == awaited_runs_.end(); });
  }
  // The reader came first where this frame was queued (it is not pushed), and reads on: the window
  // after it all the same. Frames queued or pushed already are not queued again; a frame pushed
  // before is pushed again only after a READ of one pushed (its pages evicted since).
  const uint8_t was = states_[n.id].exchange(0);
  if (was == state(kQueued, n.level)) overtaken_.fetch_add(1, std::memory_order_relaxed);
  const bool again = was == state(kPushed, n.level);
  const auto frames = store_.record_files(run->record).subspan(run->first_slot, run->frames);
  const uint32_t k = f.slot - run->first_slot;
  // A short clip is pushed whole: a clip loader reads most of it.
  const Window w = next_window(push_windows_[r], k, n.level, first_window(frames.size()));
  Job job;
  uint64_t bytes = 0;
  for (uint32_t j = k + 1; j < std::min<size_t>(w.end, frames.size()) && bytes < max_bytes_; ++j) {
    const uint32_t g = frames[j];
    // The marker is left out where a window follows (one that reaches the run's end has none).
    const bool marker = j == w.marker() && w.end < frames.size();
    const int level = names_.knows_live(g) && !marker ? push_level(g) : 0;
    if (level == 0) continue;
    const uint8_t now = states_[g].load(std::memory_order_relaxed);
    if (now == state(kQueued, level) || (now == state(kPushed, level) && !again)) continue;
    states_[g].store(state(kQueued, level), std::memory_order_relaxed);
    job.files.push_back(g);
    bytes += store_.size_at_level(store_.files()[g], level);
  }
  if (!job.files.empty()) queue(std::move(job));
}

void ClipPushes::on_lookup(const Node& n) {
  if (!states_ || n.type != NodeType::file || n.view != 0 || n.sequential || n.id >= store_.files().size()) return;
  const index::File& f = store_.files()[n.id];
  const index::ClipRun* run = store_.clip_of(f);
  if (run == nullptr) return;
  // A frame a window holds (queued or pushed at this level) starts no window: its lookup is the
  // daemon's own (make_known), or a reader's inside a window already under way.
  const uint8_t now = states_[n.id].load(std::memory_order_relaxed);
  if (now == state(kQueued, n.level) || now == state(kPushed, n.level)) return;
  states_[n.id].store(state(kQueued, n.level), std::memory_order_relaxed);
  queue(Job{{n.id}, Work::push_looked_up});
  // A frame looked up right after the one before it: a reader in turn, which reads on.
  const uint32_t k = f.slot - run->first_slot;
  const auto frames = store_.record_files(run->record).subspan(run->first_slot, run->frames);
  if (k > 0 && k + 1 < frames.size() && names_.knows_live(frames[k - 1])) make_known_after(*run, k, n.level, true);
}

void ClipPushes::before_read(const Node& n, uint64_t offset, bool page_cache) {
  const index::ClipRun* run = read_clip_run(n, offset, page_cache);
  if (run == nullptr) return;
  const index::File& f = store_.files()[n.id];
  const uint32_t k = f.slot - run->first_slot;
  const auto frames = store_.record_files(run->record).subspan(run->first_slot, run->frames);
  // Near the clip's start only: further in, a window is looked up, one request a frame, which a
  // sparse reader would not use.
  if (k + 1 < std::min<size_t>(kListAhead, frames.size()) && !names_.knows_live(frames[k + 1]))
    (void)make_known_after(*run, k, n.level, false);
}

void ClipPushes::listing_ended(uint32_t r) {
  {
    std::lock_guard lock(listing_mu_);
    std::erase(awaited_runs_, r);
    awaited_.store(awaited_runs_.size(), std::memory_order_release);
  }
  listing_cv_.notify_all();
}

bool ClipPushes::make_known_after(const index::ClipRun& run, uint32_t k, int level, bool dense) {
  const auto frames = store_.record_files(run.record).subspan(run.first_slot, run.frames);
  const auto r = static_cast<uint32_t>(&run - store_.clip_runs().data());
  // Made known already (for a reader in turn: by a job of a reader in turn, which looks up what a
  // listing did not make).
  const uint64_t last = known_windows_[r].load(std::memory_order_relaxed);
  if (unpack(last).level == level && k + 1 < unpack(last).end && (!dense || (last & kDense)))
    return false;
  Job job{{}, Work::look_up};
  job.run = r;
  job.dense = dense;
  uint32_t end;
  if (k + 1 < kListAhead) {
    end = static_cast<uint32_t>(std::min<size_t>(kListAhead, frames.size()));
    job.list_until = frames[end - 1];
    // size 0: the lookups past it start again at kFirstWindow
    known_windows_[r].store(pack({end, 0, level}), std::memory_order_relaxed);
  } else {
    end = static_cast<uint32_t>(std::min<size_t>(next_window(known_windows_[r], k, level, kFirstWindow).end, frames.size()));
  }
  if (dense) known_windows_[r].fetch_or(kDense, std::memory_order_relaxed);
  // The reader's push window goes on from here where it had none (its READ may come later).
  const Window pushing = unpack(push_windows_[r].load(std::memory_order_relaxed));
  if (pushing.level != level || k >= pushing.end) (void)next_window(push_windows_[r], k, level, first_window(frames.size()));
  for (uint32_t j = k + 1; j < end; ++j) {
    const uint32_t g = frames[j];
    const int at = push_level(g);
    if (at == 0) break;  // sequential: nothing of this run is pushed
    if (names_.knows_live(g)) continue;
    // Marked queued where looked up (its lookup's reply then starts nothing); a listed frame is not,
    // so that a reader's own lookup of it, before the listing ends, pushes it at once.
    if (job.list_until == UINT32_MAX) states_[g].store(state(kQueued, at), std::memory_order_relaxed);
    job.files.push_back(g);
  }
  if (job.files.empty()) return false;
  if (!dense && job.list_until != UINT32_MAX) {  // a READ's listing: that READ waits for it (on_read)
    job.awaited = true;
    std::lock_guard lock(listing_mu_);
    awaited_runs_.push_back(r);
    awaited_.store(awaited_runs_.size(), std::memory_order_release);
  }
  queue(std::move(job));
  return true;
}

void ClipPushes::queue(Job job) {
  {
    std::lock_guard lock(mu_);
    if (kernel_ != nullptr && !off_.load(std::memory_order_relaxed) && jobs_.size() < kMaxQueued) {
      // A listing goes first: a reader waits on it now, while a push job only saves READs.
      job.queued = std::chrono::steady_clock::now();
      if (job.work == Work::look_up) {
        jobs_.push_front(std::move(job));
        wake_listing_.notify_one();
      } else {
        jobs_.push_back(std::move(job));
      }
      wake_.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);  // not queued: its frames' marks go
  for (uint32_t f : job.files) states_[f].store(0, std::memory_order_relaxed);
  if (job.awaited) listing_ended(job.run);
}

void ClipPushes::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return stop_ || (jobs_.empty() && busy_ == 0); });
}

void ClipPushes::run(bool listings_only) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (listings_only)  // listings are at the queue's front
      wake_listing_.wait(lock, [&] { return stop_ || (!jobs_.empty() && jobs_.front().work == Work::look_up); });
    else
      wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const Job job = std::move(jobs_.front());
    jobs_.pop_front();
    ++busy_;
    KernelCache& kernel = *kernel_;  // detach() joins this thread before the kernel's object goes
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    uint64_t room = max_bytes_;
    if (job.work == Work::look_up && start - job.queued > kStaleListing) {
      // Its reader has moved on; and a listing holds the mount busy (a plain unmount fails
      // meanwhile), so none is made once no reader waits for it.
      stale_.fetch_add(1, std::memory_order_relaxed);
      for (uint32_t f : job.files) unmark_queued(f);
      if (job.awaited) listing_ended(job.run);
    } else if (job.work == Work::look_up) {
      make_known(kernel, job, room);
    } else {
      for (uint32_t f : job.files) push_marked(kernel, f, room, job.work == Work::push_looked_up);
    }
    push_ns_.fetch_add(static_cast<uint64_t>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count()),
                       std::memory_order_relaxed);
    lock.lock();
    --busy_;
    if (jobs_.empty() && busy_ == 0) idle_.notify_all();
  }
}

void ClipPushes::make_known(KernelCache& kernel, const Job& job, uint64_t& room) {
  // First the clip's folder listed (near the folder's start): one READDIRPLUS makes dozens of
  // frames' inodes, and the reader's own lookups then find the names cached (no LOOKUP). Then the
  // frames known now within the reader's push window (as it is now) are pushed, where the run is
  // cached (the others are pushed by the READ whose window reaches them). Frames the listing did
  // not make (a listing the kernel had cached, a chunk without attributes) within that window, and
  // a window deep in the clip, are looked up, all at once: one after another, they would go no
  // faster than the reader's own; each is pushed as soon as the kernel has it. A frame looked up is
  // marked queued meanwhile (so that its lookup's reply queues nothing); one left unknown is unmarked.
  const bool listing = job.list_until != UINT32_MAX;
  const std::string folder = store_.relative_path(store_.dirs()[store_.files()[job.files.front()].dir]);
  if (listing && kernel.list_folder(folder, store_.name(store_.files()[job.list_until])).ok())
    listings_.fetch_add(1, std::memory_order_relaxed);
  if (job.awaited) listing_ended(job.run);
  const index::ClipRun& run = store_.clip_runs()[job.run];
  const Window pushing = unpack(push_windows_[job.run].load(std::memory_order_relaxed));
  std::vector<uint32_t> unknown;
  for (uint32_t f : job.files) {
    const int level = push_level(f);
    const bool in_window = pushing.level == level && store_.files()[f].slot - run.first_slot < pushing.end;
    if (listing && !in_window) continue;
    if (!names_.knows_live(f)) {
      // Looked up for a reader in turn only: a sparse reader would not read most of them.
      const uint8_t now = states_[f].load(std::memory_order_relaxed);
      if (job.dense && (!listing || (now != state(kQueued, level) && now != state(kPushed, level)))) {
        states_[f].store(state(kQueued, level), std::memory_order_relaxed);
        unknown.push_back(f);
      }
      continue;
    }
    if (listing) {  // a listed frame, unless a reader's lookup queued it meanwhile
      uint8_t now = states_[f].load(std::memory_order_relaxed);
      if (now != state(kQueued, level) && now != state(kPushed, level))
        states_[f].compare_exchange_strong(now, state(kQueued, level));
    }
    if (in_window) push_marked(kernel, f, room, false);
    else unmark_queued(f);
  }
  std::vector<std::string> paths;  // a frame is a JPEG: its name in the tree is its stored one
  for (uint32_t f : unknown) paths.push_back(store_.relative_path(store_.files()[f]));
  std::vector<bool> found(unknown.size());
  if (!paths.empty())
    (void)kernel.make_known(paths, [&](size_t i) {
      found[i] = true;
      lookups_.fetch_add(1, std::memory_order_relaxed);
      push_marked(kernel, unknown[i], room, false);
    });
  for (size_t i = 0; i < unknown.size(); ++i)
    if (!found[i]) unmark_queued(unknown[i]);
}

void ClipPushes::unmark_queued(uint32_t f) {
  uint8_t marked = states_[f].load(std::memory_order_relaxed);
  if (marked != 0 && marked < kPushed) states_[f].compare_exchange_strong(marked, 0);
}

void ClipPushes::push_marked(KernelCache& kernel, uint32_t f, uint64_t& room, bool just_looked_up) {
  const uint8_t marked = states_[f].load(std::memory_order_relaxed);
  const int level = marked - kQueued;
  if (marked == 0 || marked >= kPushed || level != push_level(f)) return;  // read, or its level changed, since
  const uint64_t sent = push(kernel, f, level, room, just_looked_up);
  uint8_t expected = marked;
  states_[f].compare_exchange_strong(expected, sent ? state(kPushed, level) : uint8_t{0});
  room -= std::min(room, sent);
}

uint64_t ClipPushes::push(KernelCache& kernel, uint32_t file, int level, uint64_t room, bool just_looked_up) {
  if (off_.load(std::memory_order_relaxed)) return 0;
  const uint64_t ino = inodes_.live_file(file, level);
  std::optional<FileReader::Bytes> bytes = reader_.cached(store_.files()[file], level);
  if (!bytes || bytes->size() > room) return 0;
  Status stored = kernel.store(ino, bytes->data, bytes->tail);
  const auto until = std::chrono::steady_clock::now() + kLookupRetries;
  while (just_looked_up && !stored && stored.error().code == ENOENT && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    stored = kernel.store(ino, bytes->data, bytes->tail);
  }
  if (!stored) {
    // ENOENT: the kernel holds no such inode (forgotten, or not made yet). Anything else: it
    // takes no stores at all.
    if (stored.error().code != ENOENT) off_.store(true, std::memory_order_relaxed);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  frames_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes->size(), std::memory_order_relaxed);
  return bytes->size();
}

void ClipPushes::add_readings(Readings& out) const {
  using K = Reading::Kind;
  out.push_back({"clips.pushed_frames", K::counter, "fidelityfs_clip_pushed_frames_total",
                 "clip frames stored into the kernel's page cache", frames_.load()});
  out.push_back({"clips.pushed_bytes", K::counter, "fidelityfs_clip_pushed_bytes_total",
                 "bytes of clip frames stored into the kernel's page cache", bytes_.load()});
  out.push_back({"clips.push_us", K::counter, "fidelityfs_clip_push_microseconds_total",
                 "time the pushing threads spent storing clip frames", push_ns_.load() / 1000});
  out.push_back({"clips.push_lookups", K::counter, "", "", lookups_.load()});
  out.push_back({"clips.push_listings", K::counter, "", "", listings_.load()});
  out.push_back({"clips.push_listings_stale", K::counter, "", "", stale_.load()});
  out.push_back({"clips.push_overtaken", K::counter, "", "", overtaken_.load()});
  out.push_back({"clips.push_refused", K::counter, "", "", refused_.load()});
  out.push_back({"clips.push_dropped", K::counter, "", "", dropped_.load()});
}

}  // namespace fid::core
