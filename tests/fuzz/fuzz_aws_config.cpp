// libFuzzer target: any AWS ini text parses without crashing into trimmed, lower-case keys; and
// resolving an s3:// target with that text as both ~/.aws files either succeeds with a usable
// region and endpoint or fails with a message that does not depend on any secret in the files.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "net/aws_config.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool trimmed(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  return s.empty() || (!space(s.front()) && !space(s.back()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto sections = fid::net::parse_aws_ini(text);
  for (const auto& [name, keys] : sections) {
    check(!name.empty() && trimmed(name));
    for (const auto& [key, value] : keys) {
      check(!key.empty() && trimmed(key) && trimmed(value));
      for (char c : key) check(!(c >= 'A' && c <= 'Z'));
    }
  }

  // The files live in a memfd, reached as /proc/self/fd/N: rewriting a real file per input
  // makes ext4 flush it on close, which made this target I/O-bound at a few hundred inputs/s.
  static const int fd = memfd_create("fid-fuzz-aws-config", 0);
  if (fd < 0) return 0;
  static const std::string file = "/proc/self/fd/" + std::to_string(fd);
  static const std::string home = "/nonexistent-fid-fuzz-home";
  std::string profile = sections.empty() ? "default" : sections.begin()->first;
  auto getenv = [&](const char* name) -> const char* {
    std::string_view n(name);
    if (n == "AWS_SHARED_CREDENTIALS_FILE" || n == "AWS_CONFIG_FILE") return file.c_str();
    if (n == "HOME") return home.c_str();
    if (n == "AWS_PROFILE") return profile.c_str();
    return nullptr;
  };
  auto url = fid::net::parse_store_url("s3://fuzz-bucket/prefix");
  check(url.ok());
  auto resolve = [&](std::string_view contents) {
    if (ftruncate(fd, 0) != 0) std::abort();
    for (size_t done = 0; done < contents.size();) {
      ssize_t n = pwrite(fd, contents.data() + done, contents.size() - done,
                         static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return fid::net::resolve_s3(*url, {}, getenv);
  };
  auto target = resolve(text);
  if (target.ok()) {
    check(!target->region.empty());
    check(!target->endpoint.host.empty());
    check(target->credentials.anonymous() == (target->credentials_from == "none"));
    return 0;
  }
  // No secret in the message: with a secret's text replaced, the message must not change. Only
  // a value found once in the input can be replaced without touching anything else.
  for (const auto& [name, keys] : sections) {
    for (const char* secret_key : {"aws_secret_access_key", "aws_session_token"}) {
      auto it = keys.find(secret_key);
      if (it == keys.end() || it->second.empty()) continue;
      const std::string& secret = it->second;
      size_t at = text.find(secret);
      if (at == std::string_view::npos || at != text.rfind(secret)) continue;
      std::string replaced(text);
      char fill = secret.find_first_not_of('Z') == std::string::npos ? 'Y' : 'Z';
      replaced.replace(at, secret.size(), secret.size(), fill);
      auto again = resolve(replaced);
      check(!again.ok() && again.error().message == target.error().message);
    }
  }
  return 0;
}
