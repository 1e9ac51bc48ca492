#include "net/s3_requests.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <vector>

#include "common/fd.h"
#include "common/posix_io.h"

namespace fid::net {

namespace {

constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
constexpr size_t kMaxUploadId = 1024;

using Method = HttpRequest::Method;

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

HttpRequest request(HttpRequest::Method method, const RemoteLocation& where, std::string_view relative,
                    const Headers& query = {}, std::string payload_sha256 = {}, Headers headers = {}) {
  HttpRequest req;
  req.method = method;
  req.url = where.url_of(relative, query);
  req.sign = where.signer(method, relative, query, std::move(payload_sha256), headers);
  req.headers = std::move(headers);
  return req;
}

Headers part_query(const std::string& upload_id, size_t k) {
  return {{"partNumber", std::to_string(k + 1)}, {"uploadId", upload_id}};
}

}  // namespace

HttpRequest get_object(const RemoteLocation& where, std::string_view relative) {
  return request(Method::get, where, relative);
}

HttpRequest head_object(const RemoteLocation& where, std::string_view relative) {
  return request(Method::head, where, relative);
}

HttpRequest delete_object(const RemoteLocation& where, std::string_view relative) {
  return request(Method::del, where, relative);
}

HttpRequest put_object(const RemoteLocation& where, std::string_view relative, uint64_t size, BodyReader body,
                       const std::string& if_match) {
  Headers conditions;
  if (!if_match.empty()) conditions.emplace_back("If-Match", if_match);
  if (!body) return request(Method::put, where, relative, {}, {}, std::move(conditions));
  HttpRequest req = request(Method::put, where, relative, {}, std::string(kUnsignedPayload), std::move(conditions));
  req.headers.emplace_back("Content-Type", "application/octet-stream");
  req.body_size = size;
  req.body = std::move(body);
  return req;
}

HttpRequest copy_object(const RemoteLocation& where, std::string_view relative, const RemoteLocation& from,
                        std::string_view from_relative) {
  return request(Method::put, where, relative, {}, {}, {{"x-amz-copy-source", copy_source(from, from_relative)}});
}

HttpRequest list_objects_v2(const RemoteLocation& bucket, std::string_view prefix, std::string_view token) {
  Headers query = {{"list-type", "2"}};
  if (!prefix.empty()) query.emplace_back("prefix", prefix);
  if (!token.empty()) query.emplace_back("continuation-token", token);
  return request(Method::get, bucket, "", query);
}

HttpRequest list_folder(const RemoteLocation& where, std::string_view folder) {
  HttpRequest req;
  req.url = folder.empty() ? where.origin + where.base_path + "/" : where.url_of(folder) + "/";
  return req;
}

HttpRequest create_multipart_upload(const RemoteLocation& where, std::string_view relative) {
  HttpRequest req = request(Method::post, where, relative, {{"uploads", ""}});
  req.headers.emplace_back("Content-Type", "application/octet-stream");  // the object's
  return req;
}

HttpRequest upload_part(const RemoteLocation& where, std::string_view relative, const std::string& upload_id, size_t k,
                        uint64_t size, BodyReader body) {
  HttpRequest req = request(Method::put, where, relative, part_query(upload_id, k), std::string(kUnsignedPayload));
  req.body_size = size;
  req.body = std::move(body);
  return req;
}

Result<HttpRequest> complete_multipart_upload(const RemoteLocation& where, std::string_view relative,
                                              const std::string& upload_id, const std::vector<std::string>& etags) {
  auto xml = std::make_shared<const std::string>(complete_multipart_body(etags));
  Result<std::string> body_sha256 = sha256_hex(*xml);
  if (!body_sha256)
    return Error{EIO, fmt::format("{}: cannot make CompleteMultipartUpload: {}", url_for_messages(where.url_of(relative)),
                                  body_sha256.error().message)};
  HttpRequest req = request(Method::post, where, relative, {{"uploadId", upload_id}}, std::move(body_sha256).value());
  req.headers.emplace_back("Content-Type", "application/xml");
  req.body_size = xml->size();
  req.body = [xml](uint64_t offset, std::span<uint8_t> out) -> Result<size_t> {
    const size_t n = std::min<size_t>(out.size(), xml->size() - std::min<size_t>(offset, xml->size()));
    std::memcpy(out.data(), xml->data() + offset, n);
    return n;
  };
  return req;
}

HttpRequest abort_multipart_upload(const RemoteLocation& where, std::string_view relative, const std::string& upload_id) {
  return request(Method::del, where, relative, {{"uploadId", upload_id}});
}

// Stores an answer's body (a retry starts it again at offset 0); false beyond kMaxAnswer.
std::function<bool(uint64_t, std::span<const uint8_t>)> answer_sink(std::shared_ptr<std::string> answer, size_t max) {
  return [answer = std::move(answer), max](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset + bytes.size() > max) return false;
    answer->resize(offset);
    answer->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  };
}


std::vector<std::pair<uint64_t, uint64_t>> upload_parts(uint64_t size, uint64_t part_size) {
  part_size = std::max(part_size, kMinPartSize);
  part_size = std::max(part_size, (size + kMaxParts - 1) / kMaxParts);
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
std::optional<http::S3Error> error_in_ok_answer(std::string_view body, std::string_view result) {
  body = body.substr(0, kMaxAnswer);
  if (body.find("<Error>") == std::string_view::npos || body.find(result) != std::string_view::npos)
    return std::nullopt;
  http::S3Error e = http::parse_s3_error(body);
  if (e.code.empty()) e.code = "InternalError";
  return e;
}

}  // namespace

std::optional<http::S3Error> complete_multipart_error(std::string_view body) {
  return error_in_ok_answer(body, "<CompleteMultipartUploadResult");
}

std::optional<http::S3Error> copy_object_error(std::string_view body) {
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

Result<std::string> single_put_etag(const std::string& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    return io_error(err, path);
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || !EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr)) return Error{EIO, path + ": cannot hash (MD5)"};
  std::vector<uint8_t> buf(1 << 20);
  for (uint64_t at = 0;;) {
    Result<uint64_t> got = pread_loop(fd.get(), buf.data(), buf.size(), at, path);
    if (!got) return std::move(got).error();
    if (*got == 0) break;
    if (!EVP_DigestUpdate(ctx.get(), buf.data(), *got)) return Error{EIO, path + ": cannot hash (MD5)"};
    at += *got;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_DigestFinal_ex(ctx.get(), md, &len)) return Error{EIO, path + ": cannot hash (MD5)"};
  std::string out = "\"";
  for (unsigned k = 0; k < len; ++k) out += fmt::format("{:02x}", md[k]);
  return out + "\"";
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

std::string copy_source(const RemoteLocation& from, std::string_view relative) {
  const std::string key = from.key_prefix.empty() ? std::string(relative) : from.key_prefix + "/" + std::string(relative);
  return fmt::format("/{}/{}", uri_encode(from.bucket, false), uri_encode(key, /*keep_slash=*/true));
}

}  // namespace fid::net
