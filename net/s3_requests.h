// S3's object requests, made and answered: GET, HEAD, PUT (streamed from a callback, or empty),
// DELETE, CopyObject, ListObjectsV2 (and an HTTP server's folder listing), and the multipart
// upload (create, part, complete, abort); each made as an HttpRequest with its method, URL, headers and per-attempt SigV4 signer, the
// caller adding what to do with the answer (dst, sink, done, cancel). And what their answers
// say: an upload ID, an error S3 gives after a 200, an object's multipart ETag. Only an
// s3:// location signs; the same requests to an http(s):// one go unsigned. Fuzzed by
// tests/fuzz/fuzz_s3_upload.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "net/http_client.h"
#include "net/http_response.h"
#include "net/remote_location.h"

namespace fid::net {

inline constexpr uint64_t kMinPartSize = 5ull << 20;  // S3: every part but the last
inline constexpr uint64_t kMaxParts = 10000;
inline constexpr uint64_t kMaxCopySize = 5ull << 30;  // S3: the largest object one CopyObject copies
inline constexpr size_t kMaxAnswer = 64 * 1024;       // of a CreateMultipartUpload / CompleteMultipartUpload answer

// An upload body: (offset in the body, room for the next bytes) -> bytes given (HttpRequest::body).
using BodyReader = std::function<Result<size_t>(uint64_t, std::span<uint8_t>)>;

// The object `relative` of `where`, whole (the caller sets dst or sink; or ranged, offset, dst).
HttpRequest get_object(const RemoteLocation& where, std::string_view relative);
HttpRequest head_object(const RemoteLocation& where, std::string_view relative);
HttpRequest delete_object(const RemoteLocation& where, std::string_view relative);
// A PUT of `size` bytes read through `body` (UNSIGNED-PAYLOAD, application/octet-stream); with no
// `body`, an empty object. With `if_match`, conditional: S3 answers 412 (Precondition Failed)
// unless the object's ETag is that one now (a server without conditional writes ignores it).
HttpRequest put_object(const RemoteLocation& where, std::string_view relative, uint64_t size = 0, BodyReader body = {},
                       const std::string& if_match = {});
// The ETag S3 gives the object that one PUT of the file at `path` makes (its MD5, quoted as S3
// sends it; not so under SSE-KMS, nor on some other servers).
Result<std::string> single_put_etag(const std::string& path);
// A PUT with x-amz-copy-source: `from`'s object `from_relative` copied on the server (no larger
// than kMaxCopySize). Its answer, into a sink, may hold an error after the 200 (copy_object_error).
HttpRequest copy_object(const RemoteLocation& where, std::string_view relative, const RemoteLocation& from,
                        std::string_view from_relative);
// One page of ListObjectsV2 of the bucket `bucket` (RemoteLocation of the bucket itself): keys under
// `prefix`, from `token` on ("" for the first page). Answer: parse_list_objects_v2 (s3_listing.h).
HttpRequest list_objects_v2(const RemoteLocation& bucket, std::string_view prefix, std::string_view token);
// A GET of an http(s):// folder's listing, `folder` relative to the store ("" = its root), with
// a trailing slash (nginx: autoindex_format json). Answer: parse_autoindex_json (s3_listing.h).
HttpRequest list_folder(const RemoteLocation& where, std::string_view folder);

// Multipart. Answer of create: parse_upload_id. Part k (0-based) is part number k + 1; its
// answer's ETag goes to complete. complete's answer may hold an error after the 200
// (complete_multipart_error). complete fails (EIO) only when its body's SHA-256 cannot be made.
HttpRequest create_multipart_upload(const RemoteLocation& where, std::string_view relative);
HttpRequest upload_part(const RemoteLocation& where, std::string_view relative, const std::string& upload_id, size_t k,
                        uint64_t size, BodyReader body);
Result<HttpRequest> complete_multipart_upload(const RemoteLocation& where, std::string_view relative,
                                              const std::string& upload_id, const std::vector<std::string>& etags);
HttpRequest abort_multipart_upload(const RemoteLocation& where, std::string_view relative, const std::string& upload_id);

// A sink keeping an answer's body in `answer` (a retry starts it again at offset 0); false (the
// request fails) beyond `max` bytes (a listing's page: kMaxListingBytes, s3_listing.h).
std::function<bool(uint64_t, std::span<const uint8_t>)> answer_sink(std::shared_ptr<std::string> answer,
                                                                    size_t max = kMaxAnswer);

// The parts (offset, length) of an object of `size` bytes: part_size each (at least
// kMinPartSize, more when 10000 parts would not hold the object), the last one the rest.
std::vector<std::pair<uint64_t, uint64_t>> upload_parts(uint64_t size, uint64_t part_size);
// The UploadId of CreateMultipartUpload's answer; nullopt when missing, empty, longer than
// 1024 characters or holding characters no upload ID has (blanks, controls, XML markup).
std::optional<std::string> parse_upload_id(std::string_view body);
// CompleteMultipartUpload's request body for the parts' ETags (part k + 1 has etags[k]).
std::string complete_multipart_body(const std::vector<std::string>& etags);
// S3 may fail CompleteMultipartUpload after answering 200: the error in that answer's body, or
// nullopt when it is the result (or says nothing).
std::optional<http::S3Error> complete_multipart_error(std::string_view body);
// The same for CopyObject, which may fail after answering 200 too.
std::optional<http::S3Error> copy_object_error(std::string_view body);
// The ETag S3 gives an object completed from parts with these ETags: "MD5-N", the MD5 of the
// parts' binary MD5s and the count of parts, quoted as S3 sends it. Empty when a part's ETag
// is not an MD5 (SSE-KMS, some other servers): then it cannot be known here.
std::string multipart_etag(const std::vector<std::string>& part_etags);
// Whether the answer to a HEAD of an object (`status`, its ETag and Content-Length) shows the
// object made by completing a multipart upload of `size` bytes from parts with `part_etags`:
// nullopt when it does (the size matches and the ETag, when there is one, is that of these
// parts, exactly when multipart_etag knows it, else its "-N" count); otherwise what it shows
// instead, for a message. For a CompleteMultipartUpload whose answer was lost.
std::optional<std::string> completed_object_mismatch(long status, std::string_view etag,
                                                     std::optional<uint64_t> content_length, uint64_t size,
                                                     const std::vector<std::string>& part_etags);
// The x-amz-copy-source header's value for `from`'s object `relative`: "/BUCKET/KEY", URI-encoded
// ('/' kept in the key).
std::string copy_source(const RemoteLocation& from, std::string_view relative);

}  // namespace fid::net
