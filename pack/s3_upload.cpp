#include "pack/s3_upload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/posix_io.h"
#include "net/remote_location.h"
#include "net/s3_requests.h"

namespace fid::pack {

namespace {

constexpr std::string_view kIndexName = "index.sqlite";

// What a failed request made while opening the destination means, said for the user.
Error setup_error(const net::RemoteLocation& where, const net::StoreUrl& url, std::string_view doing, const Error& e,
                  const net::HttpResult& r) {
  if (r.status == 404 && r.s3.code == "NoSuchBucket")
    return Error{ENOENT, fmt::format("{}: there is no bucket named '{}' at {} (NoSuchBucket)", where.text,
                                     r.s3.bucket.empty() ? url.bucket : r.s3.bucket, where.origin)};
  if (r.status == 401 || r.status == 403) {
    const std::string code = r.s3.code.empty() ? "" : " " + r.s3.code;
    return Error{EACCES, fmt::format("{}: access denied (HTTP {}{}) {}: check the credentials (from {}) and their "
                                     "permission to write to the bucket",
                                     where.text, r.status, code, doing, where.credentials_from)};
  }
  if (r.status == 0)
    return Error{e.code, fmt::format("{}: cannot reach the endpoint {}: {}", where.text, where.origin, e.message)};
  const std::string detail = r.s3.message.empty() ? "" : fmt::format(" ({})", r.s3.message);
  return Error{e.code, fmt::format("{}: failed {}: {}{}", where.text, doing, e.message, detail)};
}

}  // namespace

// One object on its way up. Once started, only the transfer thread touches it.
struct S3Upload::Object {
  std::string name;  // "records/000001.rec"
  std::string copied_from;  // a server-side copy: the source object's URL, for messages
  std::filesystem::path file;
  bool remove_file = false;
  Fd fd;
  uint64_t size = 0;
  // Multipart.
  std::string upload_id;
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  std::vector<std::string> etags;
  size_t parts_left = 0;
  Status part_failure;  // the first
  std::shared_ptr<std::string> answer = std::make_shared<std::string>();
};

S3Upload::S3Upload(net::RemoteLocation where, net::StoreUrl url, S3UploadOptions up, net::HttpOptions http)
    : where_(std::move(where)), url_(std::move(url)), up_(up), client_(std::move(http)) {}

Result<std::unique_ptr<S3Upload>> S3Upload::open(const net::StoreUrl& url, const storage::StoreOptions& opts, S3UploadOptions up,
                                                 net::HttpOptions http) {
  Result<std::unique_ptr<S3Upload>> out = create(url, opts, up, std::move(http));
  if (!out) return out;
  if (Status ready = (*out)->prepare_target(); !ready) return std::move(ready).error();
  return out;
}

Result<std::unique_ptr<S3Upload>> S3Upload::create(const net::StoreUrl& url, const storage::StoreOptions& opts, S3UploadOptions up,
                                                   net::HttpOptions http) {
  if (url.kind != net::StoreUrl::Kind::s3)
    return Error{EINVAL, fmt::format("{}: a store can be written to a folder or to s3:// only", url.text)};
  Result<net::RemoteLocation> where = net::remote_location(url, opts.s3);
  if (!where) return std::move(where).error();
  if (where->credentials.anonymous())
    return Error{EACCES, fmt::format("{}: no AWS credentials (writing a store needs them: AWS_ACCESS_KEY_ID and "
                                     "AWS_SECRET_ACCESS_KEY, or a profile)",
                                     url.text)};
  http.max_in_flight = opts.max_requests;
  http.ca_file = opts.ca_file;
  up.max_objects = std::max(1u, up.max_objects);
  return std::unique_ptr<S3Upload>(new S3Upload(std::move(where).value(), url, up, std::move(http)));
}

Status S3Upload::prepare_target() {
  // An empty index.sqlite proves the prefix writable and stops an earlier store there from
  // mounting; deleting it leaves the prefix without a store until finish(). A DELETE that is
  // not allowed leaves the empty index, which no mount takes either.
  auto perform = [&](net::HttpRequest r) {
    r.cancel = up_.cancel;
    return client_.perform(std::move(r));
  };
  auto [put_status, put_result] = perform(net::put_object(where_, kIndexName));
  if (!put_status) return setup_error(where_, url_, "writing index.sqlite", put_status.error(), put_result);
  auto [del_status, del_result] = perform(net::delete_object(where_, kIndexName));
  if (!del_status && del_result.status != 403)
    return setup_error(where_, url_, "deleting index.sqlite", del_status.error(), del_result);
  return {};
}

S3Upload::~S3Upload() {
  stopping_ = true;
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return in_flight_ == 0; });
}

Status S3Upload::add_record(const std::filesystem::path& file, const std::string& name) {
  return start(file, name, true);
}

Status S3Upload::finish(const std::filesystem::path& index_file) {
  if (Status records = wait_all(); !records) return records;
  if (Status started = start(index_file, std::string(kIndexName), false); !started) return started;
  return wait_all();
}

bool S3Upload::wait_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready) {
  // The cancel flag is set by a signal handler, which cannot notify: it is looked at 10 times a second.
  while (!changed_.wait_for(lock, std::chrono::milliseconds(100), ready)) {
    if (up_.cancel && up_.cancel->load()) {
      stopping_ = true;
      return false;
    }
  }
  return true;
}

Status S3Upload::wait_all() {
  std::unique_lock lock(mu_);
  if (!wait_until(lock, [&] { return in_flight_ == 0; })) return Error{ECANCELED, fmt::format("{}: interrupted", where_.text)};
  return failure_;
}

Status S3Upload::start(const std::filesystem::path& file, const std::string& name, bool remove_file) {
  auto obj = std::make_shared<Object>();
  obj->name = name;
  obj->file = file;
  obj->remove_file = remove_file;
  obj->fd = Fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (obj->fd.get() < 0 || ::fstat(obj->fd.get(), &st) != 0)
    return io_error(errno, fmt::format("{}: cannot upload {}: {}", where_.text, name, file.string()));
  obj->size = static_cast<uint64_t>(st.st_size);
  if (Status reserved = reserve(); !reserved) return reserved;
  if (obj->size > up_.multipart_threshold) create_multipart(obj);
  else put_whole(obj);
  return {};
}

Status S3Upload::reserve() {
  std::unique_lock lock(mu_);
  if (!wait_until(lock, [&] { return in_flight_ < up_.max_objects || !failure_; }))
    return Error{ECANCELED, fmt::format("{}: interrupted", where_.text)};
  if (!failure_) return failure_;
  ++in_flight_;
  return {};
}

Status S3Upload::copy_record(const net::RemoteLocation& from, const std::string& from_relative, const std::string& name) {
  if (!from.sign || from.bucket.empty())
    return Error{EINVAL, fmt::format("{}: cannot copy {} from {}: not on S3", where_.text, from_relative, from.text)};
  auto obj = std::make_shared<Object>();
  obj->name = name;
  obj->copied_from = from.text + "/" + from_relative;
  if (Status reserved = reserve(); !reserved) return reserved;
  net::HttpRequest req = net::copy_object(where_, name, from, from_relative);
  req.sink = net::answer_sink(obj->answer);
  req.done = [this, obj](Status s, const net::HttpResult&) {
    if (s)
      if (std::optional<net::http::S3Error> e = net::copy_object_error(*obj->answer))
        s = Error{EIO, fmt::format("CopyObject failed: {}{}", e->code, e->message.empty() ? "" : " (" + e->message + ")")};
    settle(obj, std::move(s));
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
  return {};
}

std::function<Result<size_t>(uint64_t, std::span<uint8_t>)> S3Upload::body_of(const std::shared_ptr<Object>& obj,
                                                                               uint64_t from) const {
  return [obj, from, stopping = &stopping_](uint64_t offset, std::span<uint8_t> out) -> Result<size_t> {
    if (stopping->load(std::memory_order_relaxed)) return Error{ECANCELED, "cancelled: the pack stopped"};
    Result<uint64_t> got = pread_loop(obj->fd.get(), out.data(), out.size(), from + offset, obj->file.string());
    if (!got) return std::move(got).error();
    return static_cast<size_t>(*got);
  };
}

void S3Upload::put_whole(const std::shared_ptr<Object>& obj) {
  net::HttpRequest req = net::put_object(where_, obj->name, obj->size, body_of(obj, 0));
  req.done = [this, obj](Status s, const net::HttpResult&) { settle(obj, std::move(s)); };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::create_multipart(const std::shared_ptr<Object>& obj) {
  net::HttpRequest req = net::create_multipart_upload(where_, obj->name);
  req.sink = net::answer_sink(obj->answer);
  req.done = [this, obj](Status s, const net::HttpResult&) {
    if (!s) return settle(obj, std::move(s));
    std::optional<std::string> id = net::parse_upload_id(*obj->answer);
    if (!id) return settle(obj, Error{EIO, fmt::format("{}: no UploadId in the answer to CreateMultipartUpload", where_.url_of(obj->name))});
    obj->upload_id = std::move(*id);
    if (stopping_) return abort_multipart(obj, Error{ECANCELED, "cancelled: the pack stopped"});
    obj->parts = net::upload_parts(obj->size, up_.part_size);
    obj->etags.assign(obj->parts.size(), "");
    obj->parts_left = obj->parts.size();
    for (size_t k = 0; k < obj->parts.size(); ++k) put_part(obj, k);
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::put_part(const std::shared_ptr<Object>& obj, size_t k) {
  net::HttpRequest req = net::upload_part(where_, obj->name, obj->upload_id, k, obj->parts[k].second,
                                         body_of(obj, obj->parts[k].first));
  req.done = [this, obj, k](Status s, const net::HttpResult& r) {
    if (s && r.etag.empty()) s = Error{EIO, fmt::format("{}: no ETag for part {}", net::url_for_messages(where_.url_of(obj->name)), k + 1)};
    if (!s && obj->part_failure) obj->part_failure = std::move(s);
    if (s) obj->etags[k] = r.etag;
    if (--obj->parts_left > 0) return;
    if (!obj->part_failure) return abort_multipart(obj, std::move(obj->part_failure));
    complete_multipart(obj);
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::complete_multipart(const std::shared_ptr<Object>& obj) {
  Result<net::HttpRequest> made = net::complete_multipart_upload(where_, obj->name, obj->upload_id, obj->etags);
  if (!made) return abort_multipart(obj, std::move(made).error());
  net::HttpRequest req = std::move(made).value();
  obj->answer->clear();
  req.sink = net::answer_sink(obj->answer);
  req.done = [this, obj](Status s, const net::HttpResult&) {
    if (!s && (stopping_ || s.error().code == ECANCELED)) return abort_multipart(obj, std::move(s));
    if (!s) return confirm_completed(obj, std::move(s).error());
    if (std::optional<net::http::S3Error> e = net::complete_multipart_error(*obj->answer))
      return abort_multipart(obj, Error{EIO, fmt::format("{}: CompleteMultipartUpload failed: {}{}", net::url_for_messages(where_.url_of(obj->name)),
                                                         e->code, e->message.empty() ? "" : " (" + e->message + ")")});
    settle(obj, {});
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::confirm_completed(const std::shared_ptr<Object>& obj, Error failure) {
  net::HttpRequest req = net::head_object(where_, obj->name);
  req.done = [this, obj, failure = std::move(failure)](Status, const net::HttpResult& r) {
    const std::optional<std::string> mismatch =
        net::completed_object_mismatch(r.status, r.etag, r.content_length, obj->size, obj->etags);
    if (!mismatch) return settle(obj, {});
    abort_multipart(obj, Error{failure.code, fmt::format("CompleteMultipartUpload failed: {}; and it was not completed "
                                                         "unanswered: {}", failure.message, *mismatch)});
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

// Frees the parts stored so far; the object settles with `failure` whatever the abort gets.
void S3Upload::abort_multipart(const std::shared_ptr<Object>& obj, Status failure) {
  net::HttpRequest req = net::abort_multipart_upload(where_, obj->name, obj->upload_id);
  req.done = [this, obj, failure = std::move(failure)](Status s, const net::HttpResult&) mutable {
    if (!s && !failure)
      failure = Error{failure.error().code, fmt::format("{}; aborting the multipart upload failed too ({})",
                                                        failure.error().message, s.error().message)};
    settle(obj, std::move(failure));
  };
  client_.submit(std::move(req));
}

void S3Upload::settle(const std::shared_ptr<Object>& obj, Status s) {
  obj->fd.reset();
  if (s && obj->remove_file) (void)::unlink(obj->file.c_str());  // stored: the disk holds only what is in flight
  std::lock_guard lock(mu_);
  if (!s && failure_) {
    const Error& e = s.error();
    failure_ = obj->copied_from.empty()
                   ? Error{e.code, fmt::format("{}: cannot upload {}: {}", where_.text, obj->name, e.message)}
                   : Error{e.code, fmt::format("{}: cannot copy {} to {}: {}", where_.text, obj->copied_from, obj->name, e.message)};
  }
  --in_flight_;
  changed_.notify_all();
}

}  // namespace fid::pack
