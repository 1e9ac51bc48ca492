// The storage seam: where the bytes of record files come from. The read path asks for byte
// ranges of records, in batches, and for record prefixes (one large read each); it never sees
// file descriptors, URLs or retries. A source may be local (LocalRecordSource: O_DIRECT +
// io_uring) or remote (many requests in flight, retries, timeouts); either way every range of a
// batch completes with its own status, so one failing range does not fail the others.
// Checksums are the caller's: a source returns bytes as stored.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/readings.h"
#include "net/transfer_counters.h"

namespace fid::storage {

// One byte range of a record, read into `dst` (dst.size() bytes at `offset`).
struct RangeRead {
  uint32_t record = 0;
  uint64_t offset = 0;
  std::span<uint8_t> dst;
  Status status;  // set when the batch completes
};

// Bytes [0, len) of a record into `dst`, a page-aligned buffer with room for len rounded up to
// 4096 (so that a local source can read it with O_DIRECT in one request).
struct PrefixRead {
  uint32_t record = 0;
  uint64_t len = 0;
  uint8_t* dst = nullptr;
  Status status;
};

// What a source has fetched, for /.fidelity/stats; a remote source's HttpClient counts into it.
using SourceCounters = net::TransferCounters;

class RecordSource {
 public:
  using Done = std::function<void()>;
  virtual ~RecordSource() = default;

  // Reads every range of `batch`, concurrently where the source can, then calls `done` once
  // (from any thread, possibly before returning) when every range has its status. `batch` must
  // stay alive and untouched until then.
  virtual void read_ranges(std::span<RangeRead> batch, Done done) = 0;
  // The same for record prefixes.
  virtual void read_prefixes(std::span<PrefixRead> batch, Done done) = 0;

  // Records that cannot be read at all (missing, truncated, not of this store), one line each
  // naming the record and the cause; their files read as EIO.
  virtual const std::vector<std::string>& problems() const = 0;
  // One line for the log: what the source is and how it reads.
  virtual std::string describe() const = 0;
  // Bytes worth keeping in flight at once, about bandwidth x latency as measured so far; 0 when
  // a couple of concurrent reads already keep the storage busy (local disks). The prefetcher
  // keeps this many bytes of record prefixes loading, within the cache budget.
  virtual uint64_t in_flight_target() const { return 0; }
  // From now on, reads end early (ECANCELED, then EIO for a file) once *flag is true: a remote
  // source's requests on the wire stop within about a second whatever the server does (a
  // shutdown, a Ctrl-C). Local reads finish on their own. The flag must outlive the source.
  virtual void cancel_on(const std::atomic<bool>* /*flag*/) {}
  // Bytes of record r failed their checksums. A source that keeps copies (the disk cache) drops
  // its copy and returns true: reading again then fetches from the origin. Others return false.
  virtual bool drop_cached(uint32_t /*record*/) { return false; }
  // Whether this source keeps local copies of the record prefixes it reads (the disk cache): then
  // the read path loads whole prefixes, which it can keep, rather than ranges gathered from them.
  virtual bool keeps_copies() const { return false; }
  // Whether a file's own pieces cost no more to read than waiting for its record's prefix being
  // loaded: a local disk, whose queue serves both at once. A remote store pays a request per
  // read, so readers there wait for the load instead.
  virtual bool pieces_while_loading() const { return false; }
  // How many leading bytes of record r this source keeps in a local copy (the disk cache) that
  // serves any range of them without fetching; 0 for sources that keep none.
  virtual uint64_t local_copy_len(uint32_t /*record*/) const { return 0; }
  // The bytes of local copies this source may keep (the disk cache's bound); 0 for sources that
  // keep none.
  virtual uint64_t local_copy_capacity() const { return 0; }
  // What this source fetched from where the records live (a cache in front reports its origin's).
  virtual const SourceCounters& counters() const { return counters_; }
  // Its counters for /.fidelity/stats and metrics (common/readings.h): what it fetched
  // (counters()) and the in-flight target; a source with more to say (the disk cache) adds it.
  virtual void add_readings(Readings& out) const;

  // Bytes [offset, offset + len) of record r, read into memory of the source's own (a local
  // source: its O_DIRECT buffer, so nothing is copied), valid until this thread's next read
  // from a source. The default reads them with read_ranges into a buffer of the thread's.
  virtual Result<std::span<const uint8_t>> read_scratch(uint32_t record, uint64_t offset, uint64_t len);

  // Blocking forms of the two reads.
  void read_ranges(std::span<RangeRead> batch);
  Status read_prefix(uint32_t record, uint64_t len, uint8_t* dst);

 protected:
  // read_scratch's default: the range read by `read` (read_ranges, or a source's own form of it)
  // into a buffer of the thread's.
  static Result<std::span<const uint8_t>> read_into_thread_buffer(uint32_t record, uint64_t offset, uint64_t len,
                                                                  const std::function<void(std::span<RangeRead>, Done)>& read);

  SourceCounters counters_;
};

}  // namespace fid::storage
