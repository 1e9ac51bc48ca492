// AWS Signature Version 4 for S3 requests (docs.aws.amazon.com, "Signature Version 4 signing
// process"), tested against AWS's published test vectors. SHA-256 and HMAC come from OpenSSL's
// libcrypto. No I/O.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace fid::net {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials
  bool anonymous() const { return access_key_id.empty(); }
};

using Headers = std::vector<std::pair<std::string, std::string>>;

struct SignRequest {
  std::string method = "GET";
  std::string host;          // the Host header value (host or host:port)
  std::string path = "/";    // the request path exactly as sent (already URI-encoded)
  Headers query;             // decoded query parameters (name, value), any order
  // Other headers to sign (e.g. range), any case, any order; a repeated name signs its values
  // joined with ','. Host, x-amz-date, x-amz-content-sha256, x-amz-security-token and
  // authorization here are ignored: the fields above and the credentials give those.
  Headers headers;
  std::string payload_sha256;  // hex SHA-256 of the body, or UNSIGNED-PAYLOAD; "" = empty body
  std::string amz_date;      // "YYYYMMDDTHHMMSSZ"
  std::string region = "us-east-1";
  std::string service = "s3";
  // Adds x-amz-content-sha256 (S3 wants it; the generic test vectors do not have it).
  bool content_sha256_header = true;
};

// The steps, exposed for the test vectors. Those that take a digest return EIO when OpenSSL
// cannot make it ("OpenSSL HMAC-SHA256 failed"); sign() says "cannot sign the request: ...".
std::string canonical_request(const SignRequest& r, const Credentials& c);
Result<std::string> string_to_sign(const SignRequest& r, const Credentials& c);
Result<std::string> signature(const SignRequest& r, const Credentials& c);
// The headers to add to the request: x-amz-date, x-amz-content-sha256 (if asked),
// x-amz-security-token (with a session token) and Authorization. Nothing for anonymous
// credentials. The Host header is the caller's (r.host). EIO if OpenSSL cannot make a digest.
Result<Headers> sign(const SignRequest& r, const Credentials& c);

// RFC 3986 unreserved characters kept, everything else %XX (upper case); '/' kept when
// keep_slash (object keys in paths).
std::string uri_encode(std::string_view s, bool keep_slash);
// Hex SHA-256; EIO ("OpenSSL SHA-256 failed") when OpenSSL cannot make it.
Result<std::string> sha256_hex(std::string_view data);
// "YYYYMMDDTHHMMSSZ" for a Unix time.
std::string amz_date(long long unix_seconds);

}  // namespace fid::net
