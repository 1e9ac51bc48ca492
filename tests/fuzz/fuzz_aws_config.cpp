// libFuzzer target: any AWS ini text parses without crashing into trimmed, lower-case keys; and
// resolving an s3:// target with that text as both ~/.aws files either succeeds with a usable
// region and endpoint or fails with a message that holds no secret from the files.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "storage/aws_config.h"

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
  auto sections = fid::storage::parse_aws_ini(text);
  for (const auto& [name, keys] : sections) {
    check(!name.empty() && trimmed(name));
    for (const auto& [key, value] : keys) {
      check(!key.empty() && trimmed(key) && trimmed(value));
      for (char c : key) check(!(c >= 'A' && c <= 'Z'));
    }
  }

  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() /
             ("fid-fuzz-aws-config-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  static const std::string file = (dir / "aws.ini").string();
  static const std::string home = dir.string();
  {
    FILE* f = std::fopen(file.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  std::string profile = sections.empty() ? "default" : sections.begin()->first;
  auto getenv = [&](const char* name) -> const char* {
    std::string_view n(name);
    if (n == "AWS_SHARED_CREDENTIALS_FILE" || n == "AWS_CONFIG_FILE") return file.c_str();
    if (n == "HOME") return home.c_str();
    if (n == "AWS_PROFILE") return profile.c_str();
    return nullptr;
  };
  auto url = fid::storage::parse_store_url("s3://fuzz-bucket/prefix");
  check(url.ok());
  auto target = fid::storage::resolve_s3(*url, {}, getenv);
  if (target.ok()) {
    check(!target->region.empty());
    check(!target->endpoint.host.empty());
    check(target->credentials.anonymous() == (target->credentials_from == "none"));
  } else {
    for (const auto& [name, keys] : sections) {
      for (const char* secret_key : {"aws_secret_access_key", "aws_session_token"}) {
        auto it = keys.find(secret_key);
        // Only a value that is nowhere else in the input or the file name can be traced to the
        // secret: a region or endpoint with the same text is echoed legitimately.
        if (it != keys.end() && it->second.size() >= 12 && file.find(it->second) == std::string::npos &&
            text.find(it->second) == text.rfind(it->second)) {
          check(target.error().message.find(it->second) == std::string::npos);
        }
      }
    }
  }
  return 0;
}
