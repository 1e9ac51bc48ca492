// libFuzzer target: the YAML configuration and the -o option list must reject anything with an
// Error naming the cause, never throw, crash or hang.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/config.h"

namespace {

// A rejection is EINVAL with a message; anything else is a bug the fuzzer should report.
void check_rejection(const fid::Error& e) {
  if (e.code != EINVAL || e.message.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (fid::Result<fid::config::Config> cfg = fid::config::parse_config(text, "fuzz.yaml"); cfg.ok()) {
    for (const auto& r : cfg->rules) (void)fid::config::glob_match(r.glob, "train/n01440764/a.JPEG");
    fid::config::MountOptions opts;
    if (fid::Status levels = fid::config::check_levels(fid::config::merge(*cfg, opts), 10); !levels)
      check_rejection(levels.error());
  } else {
    check_rejection(cfg.error());
  }
  fid::config::MountOptions opts;
  if (fid::Status parsed = fid::config::parse_mount_options(text, opts); !parsed) check_rejection(parsed.error());
  (void)fid::config::parse_bytes(text);
  (void)fid::config::parse_level(text);
  return 0;
}
