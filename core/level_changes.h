// Level overrides set through xattrs, and what a change makes stale in the kernel. After a
// change the affected files have new inodes (core/inodes.h): the kernel's dentries that still
// name the old ones are invalidated, so the next path lookup asks again, while a file descriptor
// opened before keeps reading its old, complete level.
//
// Invalidating an entry locks its parent folder, and while a level change on a folder is being
// answered the kernel holds that folder's lock. So an entry whose parent folder has a change in
// flight (this change's own folder, or another folder changed at the same moment: a parent and a
// child changed together would otherwise each wait for the other's lock forever) is invalidated
// by the background thread, after that change's reply; all others before this reply. A file's
// own change first waits up to a second for a change of its folder to end (one just answered
// ends at once), so that its name is invalidated before its reply. A changed
// folder's own dentry goes first, which already drops every unused dentry below it: only files
// open at that moment wait for the background pass.
//
// The changed node's own name is the one entry whose parent's lock another process may hold
// while it waits for this change: rm, mv and rmdir lock the parent folder, then the node, whose
// lock the kernel holds until this change is answered. So that name is invalidated on a thread of
// its own, and the change waits for it at most kOwnEntryWait: normally it is done before the
// reply (the caller's next stat sees the new level); behind such a process it finishes after it. At most half the worker threads invalidate
// at once (the rest answer the lookups that hold folder locks shared); beyond that a change
// defers all its entries.
//
// Why this cannot deadlock: a worker only ever waits for a folder lock whose change was not yet
// registered when it looked, i.e. registered after its own; that later change defers every entry
// under earlier-registered folders, so waits only point from earlier changes to later ones and
// never form a cycle.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <functional>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/error.h"
#include "core/inodes.h"
#include "core/level_policy.h"
#include "core/namespace.h"
#include "index/store.h"

namespace fid::core {

// What the kernel keeps of the tree, as far as a change can make it stale. The FUSE adapter
// implements it with libfuse's notifications.
class KernelCache {
 public:
  virtual ~KernelCache() = default;
  // The name `name` in folder `parent` no longer leads to the inode the kernel knows. ENOENT:
  // the kernel has no such entry (nothing stale).
  virtual Status forget_entry(uint64_t parent, std::string_view name) = 0;
  // The content or attributes of `ino` changed. Best effort, so no result: the failures are the
  // kernel not having the inode (nothing stale) or the session ending (no one to tell).
  virtual void forget_inode(uint64_t ino) = 0;
  // Stores `data` then `tail`, a whole file's bytes, into the page cache of inode `ino` from
  // offset 0 (FUSE_NOTIFY_STORE: core/clip_pushes.h). ENOENT: the kernel holds no such inode;
  // another error: it takes no stores.
  virtual Status store(uint64_t ino, std::span<const uint8_t> data, std::span<const uint8_t> tail) = 0;
  // Looks `paths` (relative to the mount's root) up through the mount, all at once, so that the
  // kernel makes their inodes (LOOKUPs this daemon answers) and stores into them can follow;
  // `known(i)` runs as soon as the kernel has paths[i]. Returns once every lookup has ended (the
  // first failure); ENOTCONN: the mount does not answer yet or any more.
  virtual Status make_known(std::span<const std::string> paths, const std::function<void(size_t i)>& known) = 0;
  // Lists folder `path` (relative to the mount's root, "" for the root) through the mount, so
  // that the kernel makes, in one request, the inodes of the entries it lists with attributes
  // (READDIRPLUS: readdir=plus, and readdir=auto's first chunk of an uncached listing); which
  // ones it made, Namespace::is_known says. Stops once entry `until` is listed (empty: lists the
  // whole folder). ENOTCONN: the mount does not answer yet or any more; ESTALE: it is no longer
  // where the daemon can see it (fs/own_mount.h).
  virtual Status list_folder(const std::string& path, std::string_view until) = 0;
};

// The settings a file or folder takes per subtree: a level and an encoding choose a file's inode;
// clip reads only how a miss is read, so a change of it invalidates nothing.
enum class SubtreeSetting { scan_group, encoding, clip_reads };

class LevelChanges {
 public:
  // `workers`: the threads answering requests (at most half of them invalidate at once).
  LevelChanges(const index::Store& store, const InodeMap& inodes, LevelPolicy& levels, LevelPolicy& encodings,
               LevelPolicy& clip_reads, const Namespace& names, unsigned workers);
  // The threads that may answer any one request: all workers over /dev/fuse, a queue's over FUSE
  // over io_uring (a request waits for a thread of its CPU's queue).
  void set_workers(unsigned workers) { workers_.store(workers); }
  ~LevelChanges();
  LevelChanges(const LevelChanges&) = delete;
  LevelChanges& operator=(const LevelChanges&) = delete;

  // Invalidates through `kernel` from now on (without one, as in unit tests, nothing is), until
  // detach(): no change invalidates after it starts; it waits for the changes invalidating now
  // (call it while requests are still answered: one may wait for a lookup's folder lock), drops
  // what is still queued and stops the background threads.
  void attach(KernelCache* kernel);
  void detach();
  // Waits until the background thread has invalidated everything queued.
  void wait_idle();

  // Held from the start of a level change's request until after its reply: the kernel holds
  // the changed folder's lock exactly that long.
  class InFlight {
   public:
    InFlight(LevelChanges& changes, const Node& n);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    LevelChanges& changes_;
    std::optional<uint32_t> dir_;
  };

  // Sets (a level 1..L, kProgressive/kSequential or kClipReadsOn/Off) or removes (nullopt) the
  // override of `what` of live file or folder n. `flags`: XATTR_CREATE / XATTR_REPLACE. Errors: EPERM (not a live
  // file or folder), EINVAL (not a JPEG or a bad value), EEXIST, ENODATA.
  Status change(const Node& n, SubtreeSetting what, std::optional<int> value, int flags);

  uint64_t changes() const { return changes_.load(); }
  uint64_t invalidations() const { return invalidations_.load(); }
  // Invalidations still to come after their change's reply: folders queued for the background
  // thread, and changed nodes' own names not yet dropped (kOwnEntryWait ran out).
  size_t pending() const;
  KernelCache* kernel() const { return kernel_.load(); }

 private:
  using Plan = std::vector<std::pair<uint32_t, std::string_view>>;  // (parent folder, name), in order
  Plan plan(const Node& n) const;
  // `file_change`: todo is a file's own name (its parent folder's lock is not held for it).
  // `own`: todo starts with the changed node's own name (all but the root's changes).
  void invalidate(const Plan& todo, bool file_change, bool own);
  bool in_flight(uint32_t dir);
  // Waits up to `limit` for no change of `dir` to be in flight; whether none is.
  bool wait_not_in_flight(uint32_t dir, std::chrono::milliseconds limit);
  void forget_entry(uint64_t parent, std::string_view name);
  // The changed node's own name (see above): on own_thread_, waiting for it at most kOwnEntryWait.
  void forget_own_entry(uint64_t parent, std::string_view name);
  void background();
  void own_entries();

  const index::Store& store_;
  const InodeMap& inodes_;
  LevelPolicy& levels_;
  LevelPolicy& encodings_;
  LevelPolicy& clip_reads_;
  const Namespace& names_;
  std::atomic<unsigned> workers_;
  std::atomic<KernelCache*> kernel_{nullptr};
  unsigned invalidating_ = 0;  // changes in invalidate() (under inflight_mu_; inflight_cv_ on its end)
  std::atomic<uint64_t> changes_{0}, invalidations_{0};
  std::atomic<unsigned> sync_invalidators_{0};
  std::mutex inflight_mu_;
  std::condition_variable inflight_cv_;  // an InFlight ended
  std::unordered_multiset<uint32_t> inflight_dirs_;
  mutable std::mutex deferred_mu_;
  std::condition_variable deferred_cv_;  // background thread: work queued, or stop
  std::condition_variable idle_cv_;      // wait_idle: the queue is done
  std::deque<std::pair<uint64_t, std::vector<std::string>>> deferred_;
  size_t deferred_pending_ = 0;  // folders queued or being invalidated by the background thread
  struct OwnEntry {
    uint64_t parent;
    std::string name;
    bool done = false;
  };
  std::condition_variable own_cv_;  // own_thread_: work queued, or stop; a change: its entry done
  std::deque<std::shared_ptr<OwnEntry>> own_;
  size_t own_pending_ = 0;  // own entries queued or being invalidated
  std::atomic<bool> stopping_{false};
  std::thread thread_, own_thread_;
};

}  // namespace fid::core
