// `fidelityfs relayout`: a store in the other layout (docs/FORMAT.md "Record files") without
// transcoding anything. A scan and a file store of one pack have the same records, files and
// slots; only the order of the bytes inside each JPEG record differs. So each JPEG record is read
// once, its pieces checked and moved to their places in the other layout, and written under the
// same path; whole records are copied as they are; the index is the source's with the layout,
// the format version and the JPEG records' rows changed. A store of format 6 leaves its
// unreferenced pieces (files an append replaced) behind: the records that hold some are written
// without them, its files numbered 0..n-1 in each record, the table dropped. The new store is committed as a pack
// commits one (a temporary folder, the index last, a rename), or sent to a PackDestination.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <vector>

#include "common/error.h"
#include "pack/packer.h"
#include "index/store.h"

namespace fid::pack {

// The bytes of record r of `store` (as stored: `in`, its whole file) in the layout `to` (scan or
// file for a JPEG record; a whole record stays whole) into `out`. Checks the record's header and
// every piece's checksum first: a damaged record is an error naming it, never copied.
// Checks record r's bytes as stored (`in`, its whole file): its header is the one the index
// names and every piece's checksum holds; EIO naming the record and the piece otherwise.
Status check_record(const index::Store& store, uint32_t r, std::span<const uint8_t> in);
Status relayout_record(const index::Store& store, uint32_t r, std::span<const uint8_t> in, index::RecordLayout to,
                       std::vector<uint8_t>& out);

struct RelayoutIo {
  // Reads records `ids` whole, each into its buffer (records()[id].size bytes, page-aligned with
  // room for the size rounded up to 4096); a failed record's status is returned.
  std::function<Status(std::span<const uint32_t> ids, std::span<uint8_t* const> buffers)> read_records;
  // The store's index file (a remote store's local copy).
  std::filesystem::path index_file;
  // Where the store goes when it is not a local folder (s3://); null: `out` is the store.
  PackDestination* destination = nullptr;
};

struct RelayoutReport {
  uint64_t records = 0, rewritten = 0;  // records written, of which JPEG records re-laid out
  uint64_t bytes = 0;                   // record bytes written
  double seconds = 0;
};

// Writes `store` in `layout` to `out` (a folder, absent or empty; with a destination, a local
// scratch folder removed at the end). Progress is (records done, records).
// Whether `store` can be relaid out: formats 1 and 2 cannot (their index describes pieces
// differently from the formats relayout writes), refused with a message naming the format.
Status relayout_allowed(const index::Store& store);

Result<RelayoutReport> relayout(const index::Store& store, index::StoreLayout layout, const std::filesystem::path& out,
                                const RelayoutIo& io, const std::function<void(uint64_t, uint64_t)>& progress,
                                const std::atomic<bool>& cancel);

}  // namespace fid::pack
