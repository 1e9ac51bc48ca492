#include "net/url.h"

#include <cerrno>
#include <filesystem>
#include <optional>

#include "common/ascii.h"
#include "common/numbers.h"

namespace fid::net {
namespace {

constexpr std::string_view kSupported =
    "supported: s3://BUCKET/PREFIX, http://HOST[:PORT]/PATH, https://HOST[:PORT]/PATH or a local "
    "folder";
constexpr std::string_view kNoCredentials =
    "credentials in the URL are not supported; use AWS_* variables or ~/.aws";

// The URL as error messages show it: anything between "://" and the last '@' could be a
// password (one with a '/' in it ends the RFC 3986 authority early), so it is never echoed.
std::string shown(std::string_view url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < scheme_end + 3) return std::string(url);
  return std::string(url.substr(0, scheme_end + 3)) + "***" + std::string(url.substr(at));
}

Error url_error(std::string_view url, std::string_view what) {
  return Error{EINVAL, "URL " + shown(url) + ": " + std::string(what)};
}

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
// RFC 3986: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ). Anything else before "://" (a '/', a
// space) means the text is a path that happens to contain "://", not a URL.
bool is_scheme(std::string_view s) {
  if (s.empty() || !is_alpha(s[0])) return false;
  for (char c : s) {
    if (!is_alpha(c) && !is_digit(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

// Control characters would end up in request lines and headers. A space is fine in an S3 key
// (s3:// prefixes are raw key text, encoded when a request is made) but not in an http path,
// which is sent as given.
bool has_control(std::string_view s, bool space_too) {
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || (space_too && u == 0x20)) return true;
  }
  return false;
}

std::optional<uint16_t> parse_port(std::string_view s) {
  if (s.size() > 5) return std::nullopt;
  const std::optional<uint64_t> value = parse_u64(s);
  if (!value || *value < 1 || *value > 65535) return std::nullopt;
  return static_cast<uint16_t>(*value);
}

bool valid_host_name(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

bool valid_ipv6_literal(std::string_view host) {
  if (host.size() < 2 || host.find(':') == std::string_view::npos) return false;
  for (char c : host) {
    if (!is_hex(c) && c != ':' && c != '.') return false;
  }
  return true;
}

// "/a/b" as it goes on the wire: printable, and every '%' starts a %XX escape.
std::optional<std::string_view> path_problem(std::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') continue;
    if (i + 2 >= path.size() || !is_hex(path[i + 1]) || !is_hex(path[i + 2])) {
      return "a '%' in the path is not followed by two hex digits";
    }
  }
  if (path.find("//") != std::string_view::npos) return "the path has an empty segment ('//')";
  return std::nullopt;
}

// "http(s)://host[:port][/path]" after the scheme check; `text` is the whole URL for messages.
Result<Endpoint> parse_http(std::string_view text, bool https, size_t authority_start) {
  std::string_view rest = text.substr(authority_start);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);

  // "user:pass/word@host" ends the RFC authority at the '/', and the password then looks like
  // a bad port or host; an authority error with an '@' later on is reported as credentials,
  // without quoting the pieces.
  bool maybe_userinfo = rest.find('@') != std::string_view::npos;
  auto authority_error = [&](const std::string& what) {
    return url_error(text, maybe_userinfo ? kNoCredentials : std::string_view(what));
  };

  Endpoint ep;
  ep.https = https;
  ep.port = https ? 443 : 80;
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return authority_error("'[' without a closing ']'");
    std::string_view literal = authority.substr(1, close - 1);
    if (!valid_ipv6_literal(literal)) {
      return authority_error("'" + std::string(literal) + "' is not an IPv6 address");
    }
    ep.host = ascii_lower(literal);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return authority_error("unexpected text after the IPv6 address");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    size_t colon = authority.find(':');
    if (colon != std::string_view::npos &&
        authority.find(':', colon + 1) != std::string_view::npos) {
      return authority_error("an IPv6 address must be in brackets: http://[::1]:8080/");
    }
    std::string_view host = authority.substr(0, colon);
    if (host.empty()) return authority_error("no host");
    if (!valid_host_name(host)) {
      return authority_error("'" + std::string(host) + "' is not a host name or address");
    }
    ep.host = ascii_lower(host);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
  }
  if (has_port) {
    std::optional<uint16_t> port = parse_port(port_text);
    if (!port) {
      return authority_error("port '" + std::string(port_text) + "' is not a number in 1-65535");
    }
    ep.port = *port;
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (auto problem = path_problem(path)) return url_error(text, *problem);
  ep.base_path = std::string(path);
  return ep;
}

// The checks every remote URL shares: the scheme's "://", no userinfo, query, fragment or
// control characters. Returns where the authority starts.
Result<size_t> check_remote(std::string_view text, size_t scheme_end, bool s3) {
  size_t authority_start = scheme_end + 3;
  size_t authority_end = text.find_first_of("/?#", authority_start);
  if (authority_end == std::string_view::npos) authority_end = text.size();
  if (text.substr(authority_start, authority_end - authority_start).find('@') !=
      std::string_view::npos) {
    return url_error(text, kNoCredentials);
  }
  if (has_control(text, !s3)) {
    return url_error(text, s3 ? "control characters are not allowed"
                              : "spaces and control characters must be %-encoded");
  }
  if (text.find_first_of("?#") != std::string_view::npos) {
    return url_error(text, "query strings ('?') and fragments ('#') are not supported");
  }
  return authority_start;
}

bool valid_bucket(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!(c >= 'a' && c <= 'z') && !is_digit(c) && c != '.' && c != '-') return false;
  }
  return true;
}

}  // namespace

std::string Endpoint::host_header() const {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (!default_port()) out += ":" + std::to_string(port);
  return out;
}

std::string Endpoint::origin() const { return (https ? "https://" : "http://") + host_header(); }

Result<StoreUrl> parse_store_url(std::string_view text) {
  StoreUrl url;
  url.text = std::string(text);
  size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos || !is_scheme(text.substr(0, scheme_end))) {
    if (text.empty()) return Error{EINVAL, "URL: the store location is empty"};
    url.kind = StoreUrl::Kind::local;
    url.local = std::string(text);
    return url;
  }
  std::string scheme = ascii_lower(text.substr(0, scheme_end));
  if (scheme != "s3" && scheme != "http" && scheme != "https") {
    return url_error(text, "unknown scheme '" + scheme + "://'; " + std::string(kSupported));
  }
  Result<size_t> authority_start = check_remote(text, scheme_end, scheme == "s3");
  if (!authority_start) return std::move(authority_start).error();

  if (scheme == "s3") {
    std::string_view rest = text.substr(*authority_start);
    size_t slash = rest.find('/');
    std::string_view bucket = rest.substr(0, slash);
    std::string_view prefix =
        slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (bucket.empty()) return url_error(text, "no bucket; expected s3://BUCKET/PREFIX");
    if (!valid_bucket(bucket)) {
      // As for http: "key:sec/ret@bucket" would otherwise quote half a secret as the bucket.
      if (rest.find('@') != std::string_view::npos) return url_error(text, kNoCredentials);
      return url_error(text, "bucket '" + std::string(bucket) +
                                 "' is not 3-63 characters of a-z, 0-9, '.' and '-'");
    }
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    if (!prefix.empty() && prefix.front() == '/') {
      return url_error(text, "the prefix starts with '/' (s3://BUCKET//...)");
    }
    url.kind = StoreUrl::Kind::s3;
    url.bucket = std::string(bucket);
    url.prefix = std::string(prefix);
    return url;
  }

  Result<Endpoint> ep = parse_http(text, scheme == "https", *authority_start);
  if (!ep) return std::move(ep).error();
  url.kind = StoreUrl::Kind::http;
  url.http = std::move(ep).value();
  return url;
}

Result<Endpoint> parse_endpoint(std::string_view text) {
  size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos || !is_scheme(text.substr(0, scheme_end))) {
    return url_error(text, "an endpoint must be http://HOST[:PORT][/PATH] or https://...");
  }
  std::string scheme = ascii_lower(text.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") {
    return url_error(text, "unknown endpoint scheme '" + scheme + "://'; supported: http://, https://");
  }
  Result<size_t> authority_start = check_remote(text, scheme_end, false);
  if (!authority_start) return std::move(authority_start).error();
  return parse_http(text, scheme == "https", *authority_start);
}

bool same_store_location(const StoreUrl& a, const StoreUrl& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case StoreUrl::Kind::s3: return a.bucket == b.bucket && a.prefix == b.prefix;
    case StoreUrl::Kind::http: return a.text == b.text;
    case StoreUrl::Kind::local: break;
  }
  std::error_code ec;
  if (std::filesystem::equivalent(a.local, b.local, ec)) return true;
  const std::filesystem::path x = std::filesystem::weakly_canonical(a.local, ec);
  return !ec && x == std::filesystem::weakly_canonical(b.local, ec) && !ec;
}

}  // namespace fid::net
