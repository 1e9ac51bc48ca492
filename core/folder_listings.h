// Folders listed ahead of a reader that looks their files up one by one (a loader that builds its
// paths, a random sampler opening files by name with no listing first): the daemon lists such a
// folder itself, through the mount, once (KernelCache::list_folder). A listing with attributes
// (READDIRPLUS) hands the kernel every entry's name and inode, many to a request, so the reader's
// other lookups there find the names cached and send no LOOKUP, as after its own listing.
//
// A folder is listed once the LOOKUPs of its live files reach 1/kShare of them (at least kMinLookups):
// a reader taking a few files of a large folder does not pay for listing all of it (nor the kernel
// for an inode an entry). Clip folders are ClipPushes' to list (it pushes their frames once
// listed), and under readdir=plain a listing makes no inode, so nothing is listed ahead then.
// One thread of its own lists, a folder at a time: a listing is round trips through the mount,
// which a request thread must never wait for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "common/readings.h"
#include "config/config.h"
#include "core/inodes.h"
#include "core/level_changes.h"
#include "index/store.h"

namespace fid::core {

class FolderListings {
 public:
  FolderListings(const index::Store& store, const config::Settings& settings);
  ~FolderListings();
  FolderListings(const FolderListings&) = delete;
  FolderListings& operator=(const FolderListings&) = delete;

  // Listings go through `kernel` from now on (the listing thread starts), until detach(), which
  // drops what is queued and waits for the listing under way.
  void attach(KernelCache* kernel);
  void detach();

  // The reply to a LOOKUP that gave node n is sent: counts it for n's folder, and queues the
  // folder's listing when the count reaches its threshold.
  void on_lookup(const Node& n);
  // Until the queue is empty and no listing is under way (tests).
  void wait_idle();

  void add_readings(Readings& out) const;

  static constexpr uint32_t kShare = 64;
  static constexpr uint32_t kMinLookups = 2;
  // A listing not started this long after its folder's lookups queued it is dropped (counted as
  // stale): its reader has moved on (a scan that stats a few files a folder), and a listing
  // through the mount is work no reader waits for.
  static constexpr std::chrono::milliseconds kStale{50};

 private:
  void run();

  // A folder's LOOKUPs counted so far; kListed once it is queued (it is never queued again).
  static constexpr uint32_t kListed = UINT32_MAX;
  // Queued folders past this are dropped (counted): a listing ahead is an optimisation.
  static constexpr size_t kMaxQueued = 64;


  const index::Store& store_;
  const bool enabled_;
  std::unique_ptr<std::atomic<uint32_t>[]> lookups_;  // by folder
  std::mutex mu_;
  std::condition_variable wake_, idle_;
  struct Queued {
    uint32_t dir;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Queued> queue_;
  bool busy_ = false;
  bool stop_ = false;
  KernelCache* kernel_ = nullptr;
  std::thread thread_;
  std::atomic<uint64_t> listed_{0}, failed_{0}, dropped_{0}, stale_{0};
};

}  // namespace fid::core
