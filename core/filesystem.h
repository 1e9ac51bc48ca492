// The mount's filesystem without FUSE: every operation the kernel can ask for, on inode numbers,
// returning a value or a fid::Error whose code is the errno to reply with. fs/fuse_adapter.cpp
// turns FUSE requests into these calls and their results into replies; this class only checks
// the node an operation names and hands it to the part whose job it is:
//   namespace.h      names, inodes, attributes, listings
//   file_reader.h    the bytes of a file at a level, over a storage::RecordSource
//   orders.h         /.fidelity/order files; random_reads.h the mode their ranks' share decides
//   xattrs.h         user.fidelity.* attributes; level_changes.h what a change makes stale
//   telemetry.h      /.fidelity/stats, metrics and config (control_files.h: their snapshots)
//   request_errors.h requests answered with an error: counted and logged
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "codec/l3_batch.h"
#include "common/error.h"
#include "config/config.h"
#include "core/change_access.h"
#include "core/clip_pushes.h"
#include "core/control_files.h"
#include "core/file_reader.h"
#include "core/folder_listings.h"
#include "core/inodes.h"
#include "core/level_changes.h"
#include "core/level_policy.h"
#include "core/namespace.h"
#include "core/orders.h"
#include "core/random_reads.h"
#include "core/request_errors.h"
#include "core/telemetry.h"
#include "core/xattrs.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

class Filesystem {
 public:
  struct Options {
    std::string mountpoint;                  // for /.fidelity/config and the log
    codec::L3BatchDecoder* gpu = nullptr;    // the GPU decoder of L3 files, if the mount has one
    uid_t owner = 0;                         // the user who mounted (level_changes=owner)
    std::optional<gid_t> level_change_group; // the gid of level_changes=group=NAME
    // Tests only: called in lookup between the first reading of a live file's level and its name
    // being marked known (a level change there is the race the second reading closes).
    std::function<void(uint64_t ino)> after_level_read_for_tests;
    codec::GopDecoder* video = nullptr;      // the decoder of video streams' GOPs (null: their frames read EIO)
  };
  Filesystem(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
             const Options& options);
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // Level changes invalidate through `kernel` from now on, until detach(), which also stops the
  // source's requests (the mount is ending).
  void attach(KernelCache* kernel) {
    changes_.attach(kernel);
    pushes_.attach(kernel);
    listings_.attach(kernel);
  }
  void detach();
  // How the kernel's requests reach this mount, for stats and /.fidelity/config
  // (fs/fuse_transport.h), and how many threads can answer any one request (at most half of them
  // invalidate at once: the others answer the requests an invalidation may wait for).
  void set_transport(std::string what, unsigned threads_a_request) {
    telemetry_.set_transport(std::move(what));
    changes_.set_workers(threads_a_request);
  }
  void wait_invalidations() { changes_.wait_idle(); }  // until every queued invalidation is done

  using Entry = Namespace::Entry;
  Result<Entry> lookup(uint64_t parent, std::string_view name);
  Result<struct stat> getattr(uint64_t ino);
  Status access(uint64_t ino, int mask);
  // How a file opens. Unanswered (the default): the kernel stops sending OPEN and RELEASE after
  // the first (FUSE's no-open), a file costs a LOOKUP and its READs, and reads go through the
  // page cache in readahead-sized requests. Where large views are read directly (a mount whose
  // readahead stays at 128 KiB, a user's, on a store with L3 views over 1 MiB), OPEN is
  // answered, and such a view opens with direct I/O: a read(2) of it arrives whole, in requests
  // of up to 1 MiB, instead of 128 KiB ones.
  struct OpenMode {
    bool answered = false;
    bool direct_io = false;
  };
  static constexpr uint64_t kDirectViewBytes = uint64_t{1} << 20;
  Result<OpenMode> open(uint64_t ino, int flags);  // read-only opens of files only
  // Set by the adapter once it knows the kernel and the mount's readahead (before the mount is
  // announced ready); takes effect only on a store with views over kDirectViewBytes.
  void read_large_views_directly(bool on) { large_views_direct_.store(on && reader_.largest_view() > kDirectViewBytes); }
  bool large_views_direct() const { return large_views_direct_.load(); }
  Status opendir(uint64_t ino, int flags);
  // Bytes [offset, offset + size) of a file, clipped at its end. `page_cache`: the reader reads
  // through the kernel's page cache (not O_DIRECT), so pushes may serve its next reads.
  Result<FileReader::Bytes> read(uint64_t ino, uint64_t offset, uint64_t size, bool page_cache = true);
  // The reply to a LOOKUP that gave `ino` is sent (the kernel makes the inode as it takes it): a
  // clip's frame is queued for the kernel's page cache (core/clip_pushes.h), and a folder whose
  // files are looked up one by one may be listed ahead (core/folder_listings.h).
  void lookup_replied(uint64_t ino) {
    const Node n = inodes_.decode(ino);
    pushes_.on_lookup(n);
    listings_.on_lookup(n);
  }
  // Until every clip frame queued for the kernel's page cache is pushed (tests).
  void wait_pushes() { pushes_.wait_idle(); }
  // Until every folder queued for a listing ahead is listed (tests).
  void wait_listings() { listings_.wait_idle(); }
  // Entry i of folder `dir`'s listing; nullopt past the end. ENOTDIR if dir is not a folder.
  Result<std::optional<Namespace::DirEntry>> entry_at(uint64_t dir, size_t i);
  Result<Entry> listed_entry(const Namespace::DirEntry& d) { return names_.listed_entry(d); }
  struct statvfs statfs() const;

  Result<std::string> getxattr(uint64_t ino, std::string_view name);
  Result<std::string> listxattr(uint64_t ino);
  // Setting or removing a user.fidelity.* attribute is for the callers ChangeAccess allows (EPERM).
  Status setxattr(uint64_t ino, std::string_view name, std::string_view value, int flags, const Caller& caller);
  Status removexattr(uint64_t ino, std::string_view name, const Caller& caller);
  // Held from the start of a setxattr/removexattr request until after its reply.
  LevelChanges::InFlight change_in_flight(uint64_t ino) { return LevelChanges::InFlight(changes_, inodes_.decode(ino)); }

  // Counts a request on `ino` (stats' "requests") unless it is about /.fidelity: reading stats
  // must not change them, or a stat-then-open (cp) would see two snapshots.
  void received(Request op, uint64_t ino);
  RequestErrors& request_errors() { return request_errors_; }  // the adapter's failed requests
  std::string describe() const;  // a line for the log when the mount starts
  const config::Settings& settings() const { return settings_; }

 private:
  Result<FileReader::Bytes> read_control(const Node& n, uint64_t offset, uint64_t size);
  Result<Node> existing(uint64_t ino) const;  // a node that exists, or ENOENT

  // Set when the mount ends (detach): the source's requests stop (RecordSource::cancel_on). First,
  // so that it outlives every member that may still read while being destroyed.
  std::atomic<bool> stopping_{false};
  std::atomic<bool> large_views_direct_{false};
  const index::Store& store_;
  const config::Settings settings_;
  const Options options_;
  const InodeMap inodes_;
  LevelPolicy policy_;
  LevelPolicy encodings_;  // kProgressive or kSequential per file, inherited like levels
  LevelPolicy clip_reads_;  // kClipReadsOn or kClipReadsOff per file, inherited like levels
  const DisplayNames display_names_;
  FileReader reader_;
  OrderFiles orders_;
  RandomReads random_reads_;
  RequestErrors request_errors_;
  Telemetry telemetry_;  // renders changes_ and change_access_, built below, only when asked
  ControlFiles control_;
  Namespace names_;
  ClipPushes pushes_;
  FolderListings listings_;
  LevelChanges changes_;
  Xattrs xattrs_;
  ChangeAccess change_access_;
  uint64_t store_bytes_ = 0;
};

}  // namespace fid::core
