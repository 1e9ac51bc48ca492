#include "net/remote_location.h"

#include <fmt/format.h>

#include <cerrno>
#include <ctime>

namespace fid::net {

std::string RemoteLocation::path_of(std::string_view relative) const {
  return base_path + "/" + uri_encode(relative, /*keep_slash=*/true);
}

std::string RemoteLocation::url_of(std::string_view relative, const Headers& query) const {
  std::string url = origin + path_of(relative);
  for (size_t k = 0; k < query.size(); ++k) {
    url += k == 0 ? '?' : '&';
    url += uri_encode(query[k].first, false);
    if (!query[k].second.empty()) url += "=" + uri_encode(query[k].second, false);
  }
  return url;
}

std::function<Result<Headers>()> RemoteLocation::signer(HttpRequest::Method method, std::string_view relative,
                                                        const Headers& query, std::string payload_sha256,
                                                        Headers headers) const {
  if (!sign || credentials.anonymous()) return {};
  SignRequest r;
  r.method = method_name(method);
  r.host = host_header;
  r.path = path_of(relative);
  r.query = query;
  r.payload_sha256 = std::move(payload_sha256);
  r.headers = std::move(headers);
  r.region = region;
  return [r = std::move(r), c = credentials]() mutable {
    r.amz_date = amz_date(static_cast<long long>(std::time(nullptr)));  // fresh for every attempt
    return net::sign(r, c);
  };
}

Result<RemoteLocation> remote_location(const StoreUrl& url, const S3Options& s3) {
  RemoteLocation where;
  where.text = url.text;
  if (url.kind == StoreUrl::Kind::http) {
    where.origin = url.http.origin();
    where.host_header = url.http.host_header();
    where.base_path = url.http.base_path;
    return where;
  }
  if (url.kind != StoreUrl::Kind::s3) return Error{EINVAL, fmt::format("{}: not a remote store", url.text)};
  Result<S3Target> target = resolve_s3(url, s3);
  if (!target) return std::move(target).error();
  Endpoint endpoint = target->endpoint;
  const std::string key_prefix = url.prefix.empty() ? "" : "/" + uri_encode(url.prefix, /*keep_slash=*/true);
  if (target->path_style) {
    where.bucket_path = endpoint.base_path + "/" + uri_encode(url.bucket, false);
  } else {
    endpoint.host = url.bucket + "." + endpoint.host;
    where.bucket_path = endpoint.base_path;
  }
  where.base_path = where.bucket_path + key_prefix;
  where.bucket = url.bucket;
  where.key_prefix = url.prefix;
  where.origin = endpoint.origin();
  where.host_header = endpoint.host_header();
  where.sign = true;
  where.credentials = target->credentials;
  where.region = target->region;
  where.credentials_from = target->credentials_from;
  return where;
}

}  // namespace fid::net
