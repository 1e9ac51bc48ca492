// libFuzzer target: store URLs and endpoints must parse or fail with an EINVAL "URL ..." error,
// never crash; what parses must hold the promised shape (bucket rules, no stray slashes) and an
// endpoint must survive a round trip through origin() + base_path.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "net/url.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_error(const fid::Error& e) {
  check(e.code == EINVAL);
  check(e.message.rfind("URL", 0) == 0);
}

void check_endpoint(const fid::net::Endpoint& ep) {
  check(!ep.host.empty());
  check(ep.port != 0);
  check(ep.base_path.empty() || (ep.base_path.front() == '/' && ep.base_path.back() != '/'));
  auto again = fid::net::parse_endpoint(ep.origin() + ep.base_path);
  check(again.ok());
  check(again->https == ep.https && again->host == ep.host && again->port == ep.port &&
        again->base_path == ep.base_path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto url = fid::net::parse_store_url(text);
  if (!url.ok()) {
    check_error(url.error());
  } else {
    using Kind = fid::net::StoreUrl::Kind;
    check(url->text == text);
    switch (url->kind) {
      case Kind::local:
        check(url->local == text && !url->remote());
        break;
      case Kind::s3:
        check(url->bucket.size() >= 3 && url->bucket.size() <= 63);
        check(url->prefix.empty() || (url->prefix.front() != '/' && url->prefix.back() != '/'));
        break;
      case Kind::http:
        check_endpoint(url->http);
        break;
    }
  }
  auto ep = fid::net::parse_endpoint(text);
  if (!ep.ok()) {
    check_error(ep.error());
  } else {
    check_endpoint(*ep);
  }
  return 0;
}
