// A clip's frames pushed into the kernel's page cache (FUSE_NOTIFY_STORE), so that a clip loader
// reads a clip with a READ a window instead of one a frame. A READ of a clip's frame (from its
// start, through the page cache) queues a window of the frames after it in its run that the
// kernel knows (a LOOKUP or a listing with attributes gave it their inodes); a LOOKUP of a clip's
// frame queues that frame. Threads of their own store each queued frame into its inode's pages:
// exactly the bytes a READ of that inode returns, its level as stored, taken from the record cache
// (never loaded for a push: a frame whose run is not cached is left to its READ). Every inode's
// content is immutable (a file at another level or encoding is another inode, core/inodes.h), so a
// pushed page is never stale: it obeys every rule a read page obeys, and a level change that gives
// a frame a new inode leaves the old inode's pages to the readers that still hold it. A frame read
// re-encoded sequential (encoding=sequential) is not pushed: its bytes are made by its own READ.
//
// Pushes only for frames a reader will read. A clip of at most kWholeClip frames is pushed whole
// at its first READ (a clip loader reads most of a short clip). In a longer one, a pushed frame's
// read never reaches the daemon, so the daemon follows a reader as the kernel's readahead does: a
// window of kFirstWindow frames after a READ, all but a marker a quarter before its end; a READ of the marker (the reader read
// the window so far from the page cache) queues the next window, twice as large, while the rest
// of this one is ahead of the reader; a READ elsewhere starts at kFirstWindow again; never more
// than clip_push_bytes a window. So a reader that reads n frames of a run in turn gets about
// 2n + kFirstWindow pushed at most, and a short window of a long clip costs a short push. A READ
// that bypasses the page cache (O_DIRECT) pushes nothing: its reader would never read the pages.
//
// Without a listing a clip loader looks each frame up before reading it, and a frame's inode is
// made by the kernel only once the process that looked it up wakes: too late for a push that
// would spare that frame's READ. So a READ of a frame whose next one the kernel does not know (a
// clip's first READ, while it is answered), and a frame looked up right after its neighbour (a
// loader reading a clip in turn; not a scan that stats one frame a clip), have the daemon list
// the clip's folder through the mount up to its kListAhead-th frame (KernelCache::list_folder: an
// uncached listing starts with attributes, READDIRPLUS, hundreds of inodes a request), so that
// the reader's next lookups find the names cached (no LOOKUP) and the pushes find the frames
// known. That READ's reply waits for the listing it started, kListingWait at most (on the listing
// thread's word, never on the mount: a READ answered from the record cache would otherwise let its
// reader race the listing, looking up and reading frames itself). Further into a long clip a reader in turn has a window looked up instead, and where a
// listing made no inode (a listing the kernel had cached, readdir=plain) a reader in turn has its
// push window's frames looked up, all at once (KernelCache::make_known), each pushed as soon as
// its lookup returns.
//
// Each frame is pushed once a level: a frame's state says whether it is queued or pushed at which
// level, so a READ that overtakes a queued push does not have that frame pushed, and a frame
// pushed before is queued again only after a READ of one pushed (its pages since evicted).
//
// Why threads of their own: a store waits for the page it fills to be unlocked, and a page is
// locked while a READ of it is in flight; a request thread that pushed could wait for a READ that
// only a request thread answers. Settings: clip_push=auto|off (auto: until the kernel refuses a
// store), clip_push_bytes (the most one window holds).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/readings.h"
#include "config/config.h"
#include "core/file_reader.h"
#include "core/inodes.h"
#include "core/level_changes.h"
#include "core/namespace.h"
#include "index/store.h"

namespace fid::core {

class ClipPushes {
 public:
  ClipPushes(const index::Store& store, const InodeMap& inodes, const Namespace& names, FileReader& reader,
             const config::Settings& settings);
  ~ClipPushes();
  ClipPushes(const ClipPushes&) = delete;
  ClipPushes& operator=(const ClipPushes&) = delete;

  // Pushes go through `kernel` from now on (the pushing threads start), until detach(), which
  // drops what is queued and waits for the pushes under way.
  void attach(KernelCache* kernel);
  void detach();

  // A READ of node n at `offset`; `page_cache`: it fills the page cache (not O_DIRECT). Where n is
  // a live clip frame read from its start, queues a window of the frames after it in its run that
  // the kernel knows (unless they are queued or pushed already).
  void on_read(const Node& n, uint64_t offset, bool page_cache);
  // A READ of node n at `offset` is about to be answered: where n is a live clip frame read from
  // its start through the page cache and the kernel does not know the frame after it, has the
  // frames after it made known (a clip loader reads on; its READ of a cold run takes a while).
  void before_read(const Node& n, uint64_t offset, bool page_cache);
  // The reply to a LOOKUP that gave node n is sent: where n is a live clip frame not queued or
  // pushed at its level, queues it; where the frame before it in its run is known too, has the
  // kernel make a window of the frames after it known.
  void on_lookup(const Node& n);
  // Until the queue is empty and no push is under way (tests).
  void wait_idle();

  void add_readings(Readings& out) const;

 private:
  enum class Work : uint8_t {
    push,              // push the frames
    push_looked_up,    // push a frame just looked up (its inode may be a moment away)
    look_up,           // have the kernel look the frames up, each pushed once the kernel has it
  };
  struct Job {
    std::vector<uint32_t> files;  // frames in the order to work on them
    Work work = Work::push;
    uint32_t list_until = UINT32_MAX;  // look_up: list the clip's folder up to this frame first (none: UINT32_MAX)
    uint32_t run = 0;                   // look_up: the clip run
    bool dense = false;                 // look_up for a reader in turn: what the listing did not make is looked up
    bool awaited = false;               // look_up a READ waits for (listing_ended when done)
    std::chrono::steady_clock::time_point queued{};
  };
  // A reader's window in a run: frames [end - size, end) at `level` were queued last, all but
  // its marker, a quarter of the window before its end: the reader's READ of the marker queues the
  // next window while the reader still has the rest ahead of it (the kernel's readahead starts
  // its next window from a marked page so), so that it never catches up with the pushes.
  struct Window {
    uint32_t end = 0, size = 0;
    int level = 0;
    uint32_t marker() const { return size >= 4 ? end - size / 4 : UINT32_MAX; }
  };
  // A window as a run's slot holds it: end, size << 32, level << 56, and bit 63 where it was made
  // known for a reader in turn (known_windows_ only).
  static constexpr uint64_t kDense = uint64_t{1} << 63;
  static uint64_t pack(const Window& w) { return uint64_t{w.end} | uint64_t{w.size} << 32 | uint64_t(w.level) << 56; }
  static Window unpack(uint64_t v) {
    return {static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32) & 0xffffff, static_cast<int>(v >> 56 & 0x7f)};
  }
  // The first push window of a run of `frames`: a short clip whole.
  static uint32_t first_window(size_t frames) { return frames <= kWholeClip ? kWholeClip : kFirstWindow; }
  // The window after frame k of a run at `level` (k + 1 onwards), from the run's last one in
  // `slot`: twice its size where k is its marker or where it ended (the reader read it from the
  // page cache), else `first`. Stores it as the run's last.
  static Window next_window(std::atomic<uint64_t>& slot, uint32_t k, int level, uint32_t first);
  // A frame's state: 0 (none), kQueued + level, kPushed + level.
  static constexpr uint8_t kQueued = 0, kPushed = 128;
  static uint8_t state(uint8_t base, int level) { return static_cast<uint8_t>(base + level); }
  // The clip run of node n where a READ of it at `offset` is one pushes follow: a live clip frame,
  // not re-encoded, read from its start through the page cache; else null.
  const index::ClipRun* read_clip_run(const Node& n, uint64_t offset, bool page_cache) const;
  // The level live file f is pushed at now (its inode's); 0 if it is not pushed (sequential).
  int push_level(uint32_t f) const;
  void queue(Job job);
  // A thread's loop; `listings_only`: the thread that takes only look_up jobs.
  void run(bool listings_only);
  // Pushes live file `file` at `level` (its inode now) where a cached prefix holds its bytes and
  // they fit in `room`; returns the bytes sent.
  uint64_t push(KernelCache& kernel, uint32_t file, int level, uint64_t room, bool just_looked_up);
  // Pushes frame f if it is still marked queued at its level now; then marks it pushed (or not
  // marked, if nothing was sent) and takes what was sent from `room`.
  void push_marked(KernelCache& kernel, uint32_t f, uint64_t& room, bool just_looked_up);
  // Queues a look_up job for the frames after frame k of `run` at `level`, unless they are made
  // known already: up to its kListAhead-th frame by a listing, or a window by lookups further in.
  // Returns whether it queued a job.
  bool make_known_after(const index::ClipRun& run, uint32_t k, int level, bool dense);
  // The listing a READ of run r started (before_read) has ended, or was dropped.
  void listing_ended(uint32_t r);
  // A look_up job: its frames made known (a listing, lookups), and those in the reader's push window pushed.
  void make_known(KernelCache& kernel, const Job& job, uint64_t& room);
  // Frame f, if still marked queued (at any level), is marked none again: its work was not done.
  void unmark_queued(uint32_t f);

  // Queued jobs past this are dropped (counted): a push is an optimisation, never a backlog.
  static constexpr size_t kMaxQueued = 4096;
  // Right after a LOOKUP's reply the kernel may not have made the inode yet (the process that
  // looked it up does, once woken): more tries, a yield apart, for up to this long.
  static constexpr std::chrono::microseconds kLookupRetries{100};
  // A listing job not started this long after its lookup is dropped (core/clip_pushes.cpp).
  static constexpr std::chrono::milliseconds kStaleListing{20};
  // A reader's first window in a run, and the largest (clip_push_bytes bounds it too).
  static constexpr uint32_t kFirstWindow = 16, kMaxWindow = 1024;
  // A clip of at most this many frames has them all in its first window: its loader reads most of
  // them (a window at a time, a 64-frame clip would cost 3 READs and lose races at each window).
  static constexpr uint32_t kWholeClip = 64;
  // A reader in turn within a run's first kListAhead frames has them made known by a listing of the
  // folder up to there; further in, by looking up a window (a listing from the folder's start would
  // make every inode before it).
  static constexpr uint32_t kListAhead = 256;
  // A clip's first READ waits this long at most for the listing it started, so that its window
  // finds the frames known (else its reader, answered from the record cache, races the listing).
  static constexpr std::chrono::microseconds kListingWait{1500};
  // Threads that push: a clip's frames are pushed in order by one of them, clips at once by several.
  // They take listings too, first; one more thread takes only listings, so that a listing never
  // waits behind other clips' pushes (its reader would meanwhile look the next frames up itself).
  static constexpr unsigned kThreads = 4;

  const index::Store& store_;
  const InodeMap& inodes_;
  const Namespace& names_;
  FileReader& reader_;
  const uint64_t max_bytes_;
  std::unique_ptr<std::atomic<uint8_t>[]> states_;  // by file id; only for a store with clips
  // By clip run: its last push window and its last window made known (pack()).
  std::unique_ptr<std::atomic<uint64_t>[]> push_windows_, known_windows_;
  std::atomic<uint64_t> lookups_{0}, listings_{0}, stale_{0};
  std::mutex mu_;
  std::condition_variable wake_, wake_listing_, idle_;
  std::deque<Job> jobs_;
  unsigned busy_ = 0;
  bool stop_ = false;
  KernelCache* kernel_ = nullptr;
  std::vector<std::thread> threads_;
  std::atomic<bool> off_{false};  // the kernel refused a store: no more pushes
  std::mutex listing_mu_;
  std::condition_variable listing_cv_;
  std::vector<uint32_t> awaited_runs_;  // runs whose listing a READ waits for
  std::atomic<size_t> awaited_{0};      // their count: a READ takes the lock only where one is awaited
  std::atomic<uint64_t> frames_{0}, bytes_{0}, push_ns_{0}, refused_{0}, dropped_{0}, overtaken_{0};
};

}  // namespace fid::core
