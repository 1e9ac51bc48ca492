// libFuzzer target: the YAML configuration and the -o option list must reject anything with a
// ConfigError naming the cause, never crash or hang.
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    fid::config::Config cfg = fid::config::parse_config(text, "fuzz.yaml");
    for (const auto& r : cfg.rules) (void)fid::config::glob_match(r.glob, "train/n01440764/a.JPEG");
    fid::config::MountOptions opts;
    fid::config::check_levels(fid::config::merge(cfg, opts), 10);
  } catch (const fid::config::ConfigError&) {
  }
  try {
    fid::config::MountOptions opts;
    fid::config::parse_mount_options(text, opts);
  } catch (const fid::config::ConfigError&) {
  }
  (void)fid::config::parse_bytes(text);
  (void)fid::config::parse_level(text);
  return 0;
}
