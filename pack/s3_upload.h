// Writes a store to s3://BUCKET/PREFIX while pack builds it (PackDestination): each
// record goes up as soon as it is written, in parallel with packing, as one PUT or, above a
// threshold, as a multipart upload whose parts go up in parallel; its local file is then
// removed, so the disk holds only the records in flight. index.sqlite goes up last, once every
// record is stored: a store mounts only when it is whole. Bodies stream from the files (pread);
// nothing holds a whole record. Requests are SigV4-signed with UNSIGNED-PAYLOAD for file bodies.
// A record already on S3 (merge) is copied server-side instead (CopyObject): no bytes pass here.
// A CompleteMultipartUpload whose answer never arrives (the server may have completed it: a retry
// then gets NoSuchUpload) is settled by a HEAD of the object: the size and multipart ETag of
// these parts, or the upload fails.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "net/http_client.h"
#include "net/remote_location.h"
#include "net/url.h"
#include "pack/packer.h"
#include "storage/open_store.h"

namespace fid::pack {

struct S3UploadOptions {
  uint64_t multipart_threshold = 16ull << 20;  // objects larger than this go up in parts
  uint64_t part_size = 8ull << 20;             // raised to S3's 5 MiB minimum (and 10000 parts at most)
  unsigned max_objects = 8;                    // objects uploading at once; add_record waits for one more
  // When it becomes true (an interrupt), add_record and finish stop waiting and return ECANCELED.
  const std::atomic<bool>* cancel = nullptr;
};

class S3Upload final : public PackDestination {
 public:
  // create() and prepare_target(): for a caller that has nothing to do between them.
  static Result<std::unique_ptr<S3Upload>> open(const net::StoreUrl& url, const storage::StoreOptions& opts, S3UploadOptions up = {},
                                                net::HttpOptions http = {});
  // The upload to `url`, made without any request: EINVAL for a URL not s3://, EACCES without
  // credentials (anonymous). max_requests and ca_file come from `opts`.
  static Result<std::unique_ptr<S3Upload>> create(const net::StoreUrl& url, const storage::StoreOptions& opts,
                                                  S3UploadOptions up = {}, net::HttpOptions http = {});
  // Checks, before any packing, that the store's prefix can be written, and makes room for the
  // new store: a PUT of an empty PREFIX/index.sqlite (the one place written before the end; it
  // replaces a store already there, which then no longer mounts), then a DELETE of it. So the
  // caller calls it once it knows the pack or merge can go ahead (its source listed, its parts
  // checked), before the first record. Errors name the URL and the cause (no such bucket, access
  // denied and where the credentials came from, an endpoint that cannot be reached), never a
  // secret. Records of an earlier, larger store under the prefix are left where they are
  // (nothing lists them).
  Status prepare_target();
  // Stops: uploads in flight end (their bodies stop being read), multipart uploads begun are
  // aborted. Without a successful finish() there is no index.sqlite under the prefix.
  ~S3Upload() override;
  S3Upload(const S3Upload&) = delete;
  S3Upload& operator=(const S3Upload&) = delete;

  // Starts uploading `file` as PREFIX/name and returns; waits first while max_objects are in
  // flight. The file is removed once stored. The first failure of any upload is returned here
  // (or by finish), naming the object and the cause.
  Status add_record(const std::filesystem::path& file, const std::string& name) override;
  // Starts a server-side copy of `from`'s object `from_relative` to PREFIX/name (a PUT with
  // x-amz-copy-source) and returns; waits first while max_objects are in flight. `from` must be
  // on S3, reachable with this store's credentials; its object no larger than net::kMaxCopySize
  // (the caller checks: larger ones would need UploadPartCopy). Failures are returned as by
  // add_record, naming both objects.
  Status copy_record(const net::RemoteLocation& from, const std::string& from_relative, const std::string& name);
  // Waits for every record, then uploads `index_file` as PREFIX/index.sqlite (kept locally).
  Status finish(const std::filesystem::path& index_file) override;
  // Waits for every record; no index goes up (an append puts its own, conditionally).
  Status finish_records() { return wait_all(); }

  const net::RemoteLocation& where() const { return where_; }

 private:
  struct Object;
  S3Upload(net::RemoteLocation where, net::StoreUrl url, S3UploadOptions up, net::HttpOptions http);
  Status start(const std::filesystem::path& file, const std::string& name, bool remove_file);
  // Counts one more object in flight, waiting while max_objects are; the first failure instead.
  Status reserve();
  void put_whole(const std::shared_ptr<Object>& obj);
  void create_multipart(const std::shared_ptr<Object>& obj);
  void put_part(const std::shared_ptr<Object>& obj, size_t k);
  void complete_multipart(const std::shared_ptr<Object>& obj);
  // CompleteMultipartUpload failed with `failure` and no answer saying the server did not
  // complete it: the object stands if a HEAD shows it is this upload's; aborted otherwise.
  void confirm_completed(const std::shared_ptr<Object>& obj, Error failure);
  void abort_multipart(const std::shared_ptr<Object>& obj, Status failure);
  void settle(const std::shared_ptr<Object>& obj, Status s);
  // Waits until no upload is in flight; the first failure, if any.
  Status wait_all();
  // Waits under `lock` until `ready`, or the caller cancels (then stops the uploads; false).
  bool wait_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready);
  std::function<Result<size_t>(uint64_t, std::span<uint8_t>)> body_of(const std::shared_ptr<Object>& obj,
                                                                      uint64_t from) const;

  const net::RemoteLocation where_;
  const net::StoreUrl url_;
  const S3UploadOptions up_;
  std::mutex mu_;
  std::condition_variable changed_;
  unsigned in_flight_ = 0;  // objects not settled
  Status failure_;          // the first
  std::atomic<bool> stopping_{false};
  net::HttpClient client_;       // last: destroyed (its thread joined) before what its callbacks touch
};

}  // namespace fid::pack
