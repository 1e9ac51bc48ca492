// A local disk cache of record prefixes in front of a (remote) RecordSource: bounded in bytes
// with least-recently-used eviction, keyed by store identity and record (records never change),
// kept across remounts, safe when several mounts of one store share the folder, and never
// serving a partial file after a crash. docs/MOUNT.md describes the folder.
//
// Layout: DIR/<identity>/<record id>.p holds bytes [0, n) of the record; the file's size is the
// truth about n. Folders are 0700 and files 0600 (common/private_dir.h); every file is opened,
// renamed and removed relative to the folder, never through a symbolic link: a link (or any
// non-file) in an entry's place is an unusable copy, replaced by the next one written. A copy is
// written to DIR/<identity>/.tmp-<pid>-<tid>-<n>, synced and renamed over the entry, so a reader
// (in any process) sees the old copy or the new one, never a part; a crash leaves only temporary
// files, removed by the next scan when their process is gone or they are older than ten minutes. A
// file's modification time is its last use (touched when a read opens it, about once a second while
// it is read: the copy then stays open for the reads that follow, each of which checks with fstat
// that it is unchanged); when the folder (all identities together) would grow past max_bytes, the
// least recently used files go, under flock(DIR/.lock) so that two mounts do not both evict for the
// same bytes. Each mount counts the folder's bytes itself: it rescans the folder when its count
// says it is full, so mounts sharing it may together overshoot until that rescan (by what each
// wrote since).
//
// The cache never fails a read: a missing, short, foreign (bad header) or unreadable copy, and
// any error writing one, send the read to the inner source instead and are counted. Copies are
// written by a background thread (started on first use, so the source may be made before the
// mount forks) from a bounded queue; a copy that does not fit the queue is not kept. Only
// checked bytes are kept: every piece a copy holds matched its checksum when it was fetched, and
// a copy ends at a piece's end (index::checked_len). The reader checks what it is served too: a
// copy damaged on disk since is dropped through drop_cached and fetched again from the inner source.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "index/store.h"
#include "storage/record_source.h"

namespace fid::storage {

// What the disk cache did, for /.fidelity/stats.
struct DiskCacheStats {
  uint64_t hits = 0;             // reads served from the folder alone
  uint64_t partial_hits = 0;     // reads that fetched only the bytes past a cached copy
  uint64_t misses = 0;           // reads passed to the inner source whole
  uint64_t bytes_from_disk = 0;  // bytes served from the folder
  uint64_t bytes_written = 0;    // bytes of copies written to the folder
  uint64_t not_kept = 0;         // copies not written: the write queue was full
  uint64_t evictions = 0;        // files removed to stay under max_bytes
  uint64_t dropped = 0;          // copies removed, or fetched bytes not kept, for failing checksums
  uint64_t errors = 0;           // disk errors and unusable copies (the inner source served instead)
  uint64_t used_bytes = 0;       // bytes in the folder, as this mount last counted them
  uint64_t max_bytes = 0;
};

// What a disk-cached source adds to RecordSource.
class DiskCache {
 public:
  virtual ~DiskCache() = default;
  virtual DiskCacheStats disk_stats() const = 0;
  // Waits until every copy queued for writing is written (or given up).
  virtual void flush() = 0;
};

// Wraps `inner`: prefix reads are served from DIR when a long enough copy is there, else read
// from `inner` (only the bytes the cached copy lacks) and stored; range reads are served from
// a cached prefix that covers them, else passed to `inner` (stored only when they extend the
// cached prefix: they start at or inside its end). `identity` names the store (a hash of its
// index), so two stores never share entries; characters other than [A-Za-z0-9._-] become '_'.
// A DIR that cannot be made or written, or that another user could write to (refused, as
// open_private_dir does; describe() says why), leaves every read to `inner` (counted in errors).
std::unique_ptr<RecordSource> make_disk_cached_source(const index::Store& store, std::unique_ptr<RecordSource> inner,
                                                      const std::filesystem::path& dir, uint64_t max_bytes,
                                                      const std::string& identity);

// The disk cache of a source made by make_disk_cached_source, else nullptr.
DiskCache* as_disk_cache(RecordSource& source);

}  // namespace fid::storage
