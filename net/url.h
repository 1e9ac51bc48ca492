// Where a store lives: a local folder, s3://BUCKET/PREFIX or http(s)://HOST[:PORT]/PATH.
// Parsing only (fuzzed: tests/fuzz/fuzz_url.cpp); no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace fid::net {

// An HTTP(S) origin plus a base path: "http://127.0.0.1:7480", "https://h/a/b".
struct Endpoint {
  bool https = false;
  std::string host;        // name or IPv4 literal, or IPv6 literal without brackets
  uint16_t port = 0;       // 80/443 when not given
  std::string base_path;   // "" or "/a/b" (no trailing slash), as given (already URI-encoded)

  bool default_port() const { return port == (https ? 443 : 80); }
  // "host" or "host:port" (brackets around IPv6): the Host header and the signed host.
  std::string host_header() const;
  // "https://host:port" without the base path.
  std::string origin() const;
};

struct StoreUrl {
  enum class Kind { local, s3, http };
  Kind kind = Kind::local;
  std::string text;    // as given, for messages (URLs carry no secrets)
  std::string local;   // Kind::local: the folder
  // Kind::s3: the bucket and the key prefix ("" or "a/b", no leading or trailing slash) as raw
  // key text, not %-decoded (as the aws CLI takes s3:// URLs); the endpoint comes from the AWS
  // settings (aws_config.h).
  std::string bucket, prefix;
  // Kind::http: the server and the store's path on it.
  Endpoint http;

  bool remote() const { return kind != Kind::local; }
};

// "s3://b/p", "http://h/p", "https://h:8443/p": remote; anything without "scheme://" is a
// local path. Errors (EINVAL) name the URL and what is wrong with it (unknown scheme, empty
// bucket, bad port, ...).
Result<StoreUrl> parse_store_url(std::string_view text);
// Whether two locations name the same store: the same bucket and prefix (s3://, with the same
// endpoint settings), the same folder by identity (device and inode, through any symbolic link;
// by resolved path where one does not exist yet), or the same http(s):// URL.
bool same_store_location(const StoreUrl& a, const StoreUrl& b);
// "http(s)://host[:port][/base]": an S3 endpoint (AWS_ENDPOINT_URL, -o endpoint=).
Result<Endpoint> parse_endpoint(std::string_view text);

}  // namespace fid::net
