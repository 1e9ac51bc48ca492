// Where a remote store's objects are (an s3:// bucket and prefix, an http(s):// folder) and how a
// request for one of them is addressed and signed.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "net/aws_config.h"
#include "net/http_client.h"
#include "net/sigv4.h"
#include "net/url.h"

namespace fid::net {

// Where a remote store's objects are and how a request for one is made.
struct RemoteLocation {
  std::string text;         // the store's URL as given, for messages
  std::string origin;       // "https://bucket.s3.eu-west-1.amazonaws.com", "http://127.0.0.1:8080"
  std::string host_header;  // the Host header (signed): origin without the scheme
  std::string base_path;    // URI-encoded, no trailing slash: "/bucket/prefix", "/data", ""
  // s3:// only: the bucket and key prefix as raw text ("" or "a/b", no slash at either end), and
  // the request path of the bucket itself (base_path without the prefix: "/bucket" or "").
  std::string bucket, key_prefix, bucket_path;
  // s3:// only: requests are signed with these.
  bool sign = false;
  Credentials credentials;
  std::string region;
  std::string credentials_from;  // for messages ("environment", "profile x in FILE", "none")

  // The request path and URL of an object of the store ("index.sqlite", "records/000001.rec"),
  // with the query parameters if any (name, value: "?uploads", "?partNumber=1&uploadId=X").
  std::string path_of(std::string_view relative) const;
  std::string url_of(std::string_view relative, const Headers& query = {}) const;
  // The per-attempt signer of a request for `relative` (empty when unsigned): SigV4 headers
  // for the current time, the method and the query parameters (as given to url_of), and the
  // payload: the hex SHA-256 of the body, "UNSIGNED-PAYLOAD", or "" for an empty body; and
  // `headers`, sent with the request, signed too (S3 wants every x-amz-* header signed).
  std::function<Result<Headers>()> signer(HttpRequest::Method method, std::string_view relative,
                                          const Headers& query = {}, std::string payload_sha256 = {},
                                          Headers headers = {}) const;
};

// Where the objects of `url` (s3:// or http(s)://) are and how requests are signed; for s3://
// resolves credentials, region and endpoint (aws_config.h).
Result<RemoteLocation> remote_location(const StoreUrl& url, const S3Options& s3);

}  // namespace fid::net
