// What an HTTP response says, parsed without I/O: header values, the status classification and
// its errno, S3's XML error body, how the transport ended (from libcurl's code), and the verdict
// on one attempt of a request (done, retry, fail), which decides short-body handling. Fuzzed by tests/fuzz/fuzz_http_response.cpp; every parser is
// bounded and never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace fid::net::http {

// "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": unknown).
struct ContentRange {
  uint64_t first = 0, last = 0;     // inclusive
  std::optional<uint64_t> total;
};
std::optional<ContentRange> parse_content_range(std::string_view value);
// Decimal digits only (surrounding blanks allowed); nullopt on anything else or overflow.
std::optional<uint64_t> parse_content_length(std::string_view value);
// The entity tag as sent ("\"abc\"", "W/\"abc\"", or a bare token from lax servers), for
// If-None-Match; nullopt when empty or containing control characters.
std::optional<std::string> parse_etag(std::string_view value);
// "HTTP/1.1 206 Partial Content", "HTTP/2 200": the status code.
std::optional<int> parse_status_line(std::string_view line);
// "Name: value" -> (name, value) with blanks around the value trimmed; nullopt for lines that
// are not a header (the status line, the blank line ending the headers).
std::optional<std::pair<std::string_view, std::string_view>> split_header(std::string_view line);

// What to do about a status code: success, worth another try (server busy or failing:
// 500, 502, 503 incl. S3's SlowDown, 504, 429; also 408), or final (403, 404, 416, ...).
// 304 (Not Modified, the answer to If-None-Match) counts as success.
enum class StatusClass { success, retryable, final };
StatusClass classify_status(long code);

// <Error><Code>NoSuchBucket</Code><Message>...</Message><BucketName>b</BucketName></Error>:
// the fields found in the first 64 KiB, each at most 256 printable characters.
struct S3Error {
  std::string code, message, bucket;
};
S3Error parse_s3_error(std::string_view body);

// "bytes=FIRST-LAST" for `len` (> 0) bytes at `first`.
std::string range_header(uint64_t first, uint64_t len);

// How the transport ended an attempt (from libcurl's CURLcode: transport_of).
enum class Transport {
  ok,
  timeout,       // connect timeout, or no bytes for the stall timeout
  connect,       // refused, unreachable, DNS
  broken,        // connection reset or closed before the body was complete
  body_too_big,  // the body would overflow the destination (the client aborted it)
  failed,        // anything else (TLS verification, bad URL, ...): not retried
};
Transport transport_of(int curl_code);
// The errno a final status means for a read: ENOENT (404), EACCES (401, 403), else EIO.
int errno_for_status(long status);

// One attempt of a request, as observed.
struct Attempt {
  Transport transport = Transport::ok;
  long status = 0;                  // 0 when no response came
  bool ranged = false;              // a Range header asked for [want_first, want_first + want_len)
  uint64_t want_first = 0, want_len = 0;
  std::optional<ContentRange> content_range;
  std::optional<uint64_t> content_length;
  bool head = false;                // HEAD: no body expected
  uint64_t body_bytes = 0;          // bytes of the body delivered to the destination
  std::string_view transport_detail;  // the transport's own words for a failure ("Connection refused")
};

enum class Verdict { done, retry, fail };
struct Judgement {
  Verdict verdict = Verdict::fail;
  // Leading bytes of this attempt's range that arrived intact and are kept: a retry asks for
  // the rest only (ranged requests that got a matching 206).
  uint64_t kept = 0;
  std::string cause;  // "HTTP 503", "connection reset", "short body: 10 of 20 bytes", ...
};
// The verdict on a successful (2xx) or failed attempt; `cause` is empty only for done. A 2xx
// whose Content-Range does not start where asked, or a 200 to a ranged request not at offset
// 0, fails (the server ignores ranges); an object shorter than the range fails without retry;
// a body cut short by the connection is retried for its remainder.
Judgement judge(const Attempt& a);

}  // namespace fid::net::http
