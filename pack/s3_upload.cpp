#include "pack/s3_upload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "common/posix_io.h"
#include "storage/remote_store.h"

namespace fid::pack {

namespace {

constexpr std::string_view kIndexName = "index.sqlite";
constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
constexpr size_t kMaxAnswer = 64 * 1024;   // of a CreateMultipartUpload / CompleteMultipartUpload answer
constexpr size_t kMaxUploadId = 1024;

using Method = storage::HttpRequest::Method;

std::string xml_escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// What a failed request made while opening the destination means, said for the user.
Error setup_error(const storage::RemoteLocation& where, const storage::StoreUrl& url, std::string_view doing, const Error& e,
                  const storage::HttpResult& r) {
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

// Stores an answer's body (a retry starts it again at offset 0); false beyond kMaxAnswer.
std::function<bool(uint64_t, std::span<const uint8_t>)> answer_sink(std::shared_ptr<std::string> answer) {
  return [answer = std::move(answer)](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset + bytes.size() > kMaxAnswer) return false;
    answer->resize(offset);
    answer->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  };
}

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> upload_parts(uint64_t size, uint64_t part_size) {
  part_size = std::max(part_size, S3Upload::kMinPartSize);
  part_size = std::max(part_size, (size + S3Upload::kMaxParts - 1) / S3Upload::kMaxParts);
  std::vector<std::pair<uint64_t, uint64_t>> parts;
  for (uint64_t at = 0; at < size; at += part_size) parts.emplace_back(at, std::min(part_size, size - at));
  if (parts.empty()) parts.emplace_back(0, 0);  // an empty object is one empty part
  return parts;
}

std::optional<std::string> parse_upload_id(std::string_view body) {
  body = body.substr(0, kMaxAnswer);
  constexpr std::string_view open = "<UploadId>", close = "</UploadId>";
  const size_t a = body.find(open);
  if (a == std::string_view::npos) return std::nullopt;
  const size_t from = a + open.size();
  const size_t b = body.find(close, from);
  if (b == std::string_view::npos) return std::nullopt;
  std::string_view id = body.substr(from, b - from);
  while (!id.empty() && (id.front() == ' ' || id.front() == '\n' || id.front() == '\r' || id.front() == '\t'))
    id.remove_prefix(1);
  while (!id.empty() && (id.back() == ' ' || id.back() == '\n' || id.back() == '\r' || id.back() == '\t'))
    id.remove_suffix(1);
  if (id.empty() || id.size() > kMaxUploadId) return std::nullopt;
  for (char c : id)
    if (c <= 0x20 || c >= 0x7F || c == '<' || c == '>' || c == '&' || c == '"') return std::nullopt;
  return std::string(id);
}

std::string complete_multipart_body(const std::vector<std::string>& etags) {
  std::string out = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (size_t k = 0; k < etags.size(); ++k)
    out += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", k + 1, xml_escaped(etags[k]));
  out += "</CompleteMultipartUpload>";
  return out;
}

namespace {

// The error in a 200 answer whose result element is `result` ("<CompleteMultipartUploadResult").
std::optional<storage::http::S3Error> error_in_ok_answer(std::string_view body, std::string_view result) {
  body = body.substr(0, kMaxAnswer);
  if (body.find("<Error>") == std::string_view::npos || body.find(result) != std::string_view::npos)
    return std::nullopt;
  storage::http::S3Error e = storage::http::parse_s3_error(body);
  if (e.code.empty()) e.code = "InternalError";
  return e;
}

}  // namespace

std::optional<storage::http::S3Error> complete_multipart_error(std::string_view body) {
  return error_in_ok_answer(body, "<CompleteMultipartUploadResult");
}

std::optional<storage::http::S3Error> copy_object_error(std::string_view body) {
  return error_in_ok_answer(body, "<CopyObjectResult");
}

namespace {

std::string_view unquoted(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') return etag.substr(1, etag.size() - 2);
  return etag;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The 16 bytes of an MD5 written as 32 hex digits; false for anything else.
bool md5_bytes(std::string_view hex, std::string& out) {
  if (hex.size() != 32) return false;
  for (size_t k = 0; k < 32; k += 2) {
    const int hi = hex_digit(hex[k]), lo = hex_digit(hex[k + 1]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace

std::string multipart_etag(const std::vector<std::string>& part_etags) {
  std::string digests;
  for (const std::string& e : part_etags)
    if (!md5_bytes(unquoted(e), digests)) return {};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(digests.data(), digests.size(), md, &len, EVP_md5(), nullptr)) return {};
  std::string out = "\"";
  for (unsigned k = 0; k < len; ++k) out += fmt::format("{:02x}", md[k]);
  return out + fmt::format("-{}\"", part_etags.size());
}

std::optional<std::string> completed_object_mismatch(long status, std::string_view etag,
                                                     std::optional<uint64_t> content_length, uint64_t size,
                                                     const std::vector<std::string>& part_etags) {
  if (status == 404) return std::string("there is no such object");
  if (status == 0) return std::string("a HEAD of the object got no answer");
  if (status != 200) return fmt::format("a HEAD of the object got HTTP {}", status);
  if (!content_length) return std::string("a HEAD of the object did not say its size");
  if (*content_length != size) return fmt::format("the object holds {} bytes, not {}", *content_length, size);
  if (etag.empty()) return std::nullopt;  // the server gives none: the size is all there is to check
  const std::string want = multipart_etag(part_etags);
  if (!want.empty()) {
    if (unquoted(etag).size() == unquoted(want).size() &&
        std::equal(unquoted(etag).begin(), unquoted(etag).end(), unquoted(want).begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
      return std::nullopt;
    return fmt::format("the object's ETag {} is not that of these parts ({})", etag, want);
  }
  const std::string_view bare = unquoted(etag);
  const size_t dash = bare.rfind('-');
  if (dash != std::string_view::npos && bare.substr(dash + 1) == std::to_string(part_etags.size())) return std::nullopt;
  return fmt::format("the object's ETag {} is not that of an object of {} parts", etag, part_etags.size());
}

std::string copy_source(const storage::RemoteLocation& from, std::string_view relative) {
  const std::string key = from.key_prefix.empty() ? std::string(relative) : from.key_prefix + "/" + std::string(relative);
  return "/" + storage::uri_encode(from.bucket, false) + "/" + storage::uri_encode(key, /*keep_slash=*/true);
}

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
  storage::Headers query(size_t part) const {
    return {{"partNumber", std::to_string(part + 1)}, {"uploadId", upload_id}};
  }
};

S3Upload::S3Upload(storage::RemoteLocation where, storage::StoreUrl url, S3UploadOptions up, storage::HttpOptions http)
    : where_(std::move(where)), url_(std::move(url)), up_(up), client_(std::move(http)) {}

Result<std::unique_ptr<S3Upload>> S3Upload::open(const storage::StoreUrl& url, const storage::StoreOptions& opts, S3UploadOptions up,
                                                 storage::HttpOptions http) {
  Result<std::unique_ptr<S3Upload>> out = create(url, opts, up, std::move(http));
  if (!out) return out;
  if (Status ready = (*out)->prepare_target(); !ready) return std::move(ready).error();
  return out;
}

Result<std::unique_ptr<S3Upload>> S3Upload::create(const storage::StoreUrl& url, const storage::StoreOptions& opts, S3UploadOptions up,
                                                   storage::HttpOptions http) {
  if (url.kind != storage::StoreUrl::Kind::s3)
    return Error{EINVAL, fmt::format("{}: a store can be written to a folder or to s3:// only", url.text)};
  Result<storage::RemoteLocation> where = storage::remote_location(url, opts.s3);
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
  auto index_request = [&](Method method) {
    storage::HttpRequest r;
    r.method = method;
    r.url = where_.url_of(kIndexName);
    r.sign = where_.signer(method, kIndexName);
    r.cancel = up_.cancel;
    return client_.perform(std::move(r));
  };
  auto [put_status, put_result] = index_request(Method::put);
  if (!put_status) return setup_error(where_, url_, "writing index.sqlite", put_status.error(), put_result);
  auto [del_status, del_result] = index_request(Method::del);
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

Status S3Upload::copy_record(const storage::RemoteLocation& from, const std::string& from_relative, const std::string& name) {
  if (!from.sign || from.bucket.empty())
    return Error{EINVAL, fmt::format("{}: cannot copy {} from {}: not on S3", where_.text, from_relative, from.text)};
  auto obj = std::make_shared<Object>();
  obj->name = name;
  obj->copied_from = from.text + "/" + from_relative;
  if (Status reserved = reserve(); !reserved) return reserved;
  const storage::Headers copy = {{"x-amz-copy-source", copy_source(from, from_relative)}};
  storage::HttpRequest req;
  req.method = Method::put;
  req.url = where_.url_of(name);
  req.sign = where_.signer(Method::put, name, {}, {}, copy);
  req.headers = copy;
  req.sink = answer_sink(obj->answer);
  req.done = [this, obj](Status s, const storage::HttpResult&) {
    if (s)
      if (std::optional<storage::http::S3Error> e = copy_object_error(*obj->answer))
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
  storage::HttpRequest req;
  req.method = Method::put;
  req.url = where_.url_of(obj->name);
  req.sign = where_.signer(Method::put, obj->name, {}, std::string(kUnsignedPayload));
  req.headers.emplace_back("Content-Type", "application/octet-stream");
  req.body_size = obj->size;
  req.body = body_of(obj, 0);
  req.done = [this, obj](Status s, const storage::HttpResult&) { settle(obj, std::move(s)); };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::create_multipart(const std::shared_ptr<Object>& obj) {
  const storage::Headers query = {{"uploads", ""}};
  storage::HttpRequest req;
  req.method = Method::post;
  req.url = where_.url_of(obj->name, query);
  req.sign = where_.signer(Method::post, obj->name, query);
  req.headers.emplace_back("Content-Type", "application/octet-stream");  // the object's
  req.sink = answer_sink(obj->answer);
  req.done = [this, obj](Status s, const storage::HttpResult&) {
    if (!s) return settle(obj, std::move(s));
    std::optional<std::string> id = parse_upload_id(*obj->answer);
    if (!id) return settle(obj, Error{EIO, fmt::format("{}: no UploadId in the answer to CreateMultipartUpload", where_.url_of(obj->name))});
    obj->upload_id = std::move(*id);
    if (stopping_) return abort_multipart(obj, Error{ECANCELED, "cancelled: the pack stopped"});
    obj->parts = upload_parts(obj->size, up_.part_size);
    obj->etags.assign(obj->parts.size(), "");
    obj->parts_left = obj->parts.size();
    for (size_t k = 0; k < obj->parts.size(); ++k) put_part(obj, k);
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::put_part(const std::shared_ptr<Object>& obj, size_t k) {
  const storage::Headers query = obj->query(k);
  storage::HttpRequest req;
  req.method = Method::put;
  req.url = where_.url_of(obj->name, query);
  req.sign = where_.signer(Method::put, obj->name, query, std::string(kUnsignedPayload));
  req.body_size = obj->parts[k].second;
  req.body = body_of(obj, obj->parts[k].first);
  req.done = [this, obj, k](Status s, const storage::HttpResult& r) {
    if (s && r.etag.empty()) s = Error{EIO, fmt::format("{}: no ETag for part {}", storage::url_for_messages(where_.url_of(obj->name)), k + 1)};
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
  const storage::Headers query = {{"uploadId", obj->upload_id}};
  auto xml = std::make_shared<const std::string>(complete_multipart_body(obj->etags));
  storage::HttpRequest req;
  req.method = Method::post;
  req.url = where_.url_of(obj->name, query);
  req.sign = where_.signer(Method::post, obj->name, query, storage::sha256_hex(*xml));
  req.headers.emplace_back("Content-Type", "application/xml");
  req.body_size = xml->size();
  req.body = [xml](uint64_t offset, std::span<uint8_t> out) -> Result<size_t> {
    const size_t n = std::min<size_t>(out.size(), xml->size() - std::min<size_t>(offset, xml->size()));
    std::memcpy(out.data(), xml->data() + offset, n);
    return n;
  };
  obj->answer->clear();
  req.sink = answer_sink(obj->answer);
  req.done = [this, obj](Status s, const storage::HttpResult&) {
    if (!s && (stopping_ || s.error().code == ECANCELED)) return abort_multipart(obj, std::move(s));
    if (!s) return confirm_completed(obj, std::move(s).error());
    if (std::optional<storage::http::S3Error> e = complete_multipart_error(*obj->answer))
      return abort_multipart(obj, Error{EIO, fmt::format("{}: CompleteMultipartUpload failed: {}{}", storage::url_for_messages(where_.url_of(obj->name)),
                                                         e->code, e->message.empty() ? "" : " (" + e->message + ")")});
    settle(obj, {});
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

void S3Upload::confirm_completed(const std::shared_ptr<Object>& obj, Error failure) {
  storage::HttpRequest req;
  req.method = Method::head;
  req.url = where_.url_of(obj->name);
  req.sign = where_.signer(Method::head, obj->name);
  req.done = [this, obj, failure = std::move(failure)](Status, const storage::HttpResult& r) {
    const std::optional<std::string> mismatch =
        completed_object_mismatch(r.status, r.etag, r.content_length, obj->size, obj->etags);
    if (!mismatch) return settle(obj, {});
    abort_multipart(obj, Error{failure.code, fmt::format("CompleteMultipartUpload failed: {}; and it was not completed "
                                                         "unanswered: {}", failure.message, *mismatch)});
  };
  req.cancel = &stopping_;
  client_.submit(std::move(req));
}

// Frees the parts stored so far; the object settles with `failure` whatever the abort gets.
void S3Upload::abort_multipart(const std::shared_ptr<Object>& obj, Status failure) {
  const storage::Headers query = {{"uploadId", obj->upload_id}};
  storage::HttpRequest req;
  req.method = Method::del;
  req.url = where_.url_of(obj->name, query);
  req.sign = where_.signer(Method::del, obj->name, query);
  req.done = [this, obj, failure = std::move(failure)](Status s, const storage::HttpResult&) mutable {
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
