// Pack, merge and relayout whose store is at s3://: each builds the store in a local scratch
// folder named after the URL, one run per URL at a time (ScratchLock), sends each record as it is
// written (S3Upload) and the index last. The command line only parses and prints.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "index/store.h"
#include "net/url.h"
#include "pack/append.h"
#include "pack/merge.h"
#include "pack/packer.h"
#include "pack/relayout.h"
#include "storage/open_store.h"

namespace fid::pack {

// The local scratch path where `command` (pack, merge, relayout) builds a store bound for `url`:
// under $TMPDIR, named after the URL so that the next run for the same URL clears what a killed
// one left there.
std::filesystem::path scratch_store(std::string_view command, const net::StoreUrl& url);

// One pack, merge or relayout to a URL at a time (under one $TMPDIR): each clears the scratch
// folder and the store at the URL when it starts, so a second run would wreck the first. A
// non-blocking flock of a file beside the scratch folders, named after the URL (the commands share
// it); the file is removed when the lock is let go.
class ScratchLock {
 public:
  // EBUSY naming the URL when another run holds the lock.
  static Result<ScratchLock> take(const net::StoreUrl& url);
  ScratchLock(ScratchLock&&) = default;
  ScratchLock& operator=(ScratchLock&&) = delete;
  ~ScratchLock();

  const std::filesystem::path& file() const { return file_; }

 private:
  ScratchLock(std::filesystem::path file, Fd fd) : file_(std::move(file)), fd_(std::move(fd)) {}
  std::filesystem::path file_;
  Fd fd_;
};

// pack() into the s3:// store `url`, built in options.store (scratch_store("pack", url), as
// check_pack_options accepted it). `source` null: the local sources options names. The store at
// the URL is cleared only once the source has been listed: a source that cannot be listed leaves
// it as it was.
Result<PackReport> pack_to_s3(const PackOptions& options, std::unique_ptr<sources::PackSource> source,
                              const net::StoreUrl& url, const storage::StoreOptions& store_options,
                              const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>& cancel);

// merge() of the s3:// parts (every URL but the last) into the s3:// store urls.back(): the parts'
// indexes come down to a scratch folder (every record of each checked), their records are copied
// on the server, the index goes up last. Refused parts leave the store at the URL as it was.
Result<MergeReport> merge_on_s3(const std::vector<net::StoreUrl>& urls, const storage::StoreOptions& store_options,
                                const std::atomic<bool>& cancel);

// relayout() of `store` into the s3:// store `url` (io.destination is set here).
Result<RelayoutReport> relayout_to_s3(const index::Store& store, index::StoreLayout layout, RelayoutIo io,
                                      const net::StoreUrl& url, const storage::StoreOptions& store_options,
                                      const std::function<void(uint64_t, uint64_t)>& progress,
                                      const std::atomic<bool>& cancel);

// An append to the s3:// store `url` (docs/FORMAT.md "Appended stores"), opened: one per URL
// here at a time (its ScratchLock), the store's index fetched (its records checked) into the
// scratch folder, where take_store_options reads it, and its ETag kept.
struct S3AppendTarget {
  net::StoreUrl url;
  storage::StoreOptions options;
  ScratchLock lock;
  std::filesystem::path scratch;  // scratch_store("append", url), cleared
  std::string index_etag;         // of the index fetched
  std::filesystem::path index_dir() const { return scratch / "store"; }
};
Result<S3AppendTarget> open_s3_append(const net::StoreUrl& url, const storage::StoreOptions& options);

// Appends options.sources (or `source`) to the target: the new records go up under names of this
// append's own (records/NNNNNN-BASE-OWN.rec), then the union index, as one PUT with If-Match on
// the ETag of the index it was made from (EBUSY when another append replaced it first), then the
// records that earlier appends left, and that no index references, are deleted. On any failure,
// and on `cancel`, the store is the one it was; the records already uploaded are left over.
Result<AppendReport> append_to_s3(const S3AppendTarget& target, const PackOptions& options,
                                  std::unique_ptr<sources::PackSource> source,
                                  const std::function<void(const PackProgress&)>& progress,
                                  const std::atomic<bool>& cancel);

// The records under the s3:// store `url` named as an append names them that `store` (its
// index) does not reference: what interrupted or refused appends left.
Result<std::vector<std::string>> s3_append_leftovers(const net::StoreUrl& url, const storage::StoreOptions& options,
                                                     const index::Store& store);

}  // namespace fid::pack
