// The table of the settings a config file and -o both set (the members of CommonSettings): one
// row a setting, with its name, what it takes, its parser, its documentation, its merge into
// Settings and its value as /.fidelity/config shows it. Everything that lists these settings
// comes from the rows: parse_config and parse_mount_options (config.cpp), merge(), the -o of the
// store commands (parse_store_options), mount_option_docs() (so the man pages, `mount --help`,
// the bash completion and docs/MOUNT.md's table) and core::Telemetry's /.fidelity/config.
//
// A default is written once, in Settings' member initializer (config.h): merge() starts from
// Settings{}, and the docs render the default from Settings{} (default_doc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"

namespace fid::config {

// A setting's value as /.fidelity/config shows it: a number or text.
using SettingValue = std::variant<uint64_t, std::string>;

// Which commands take a setting: every setting is a key of the config file and an -o option of
// mount; `store` ones are also -o options of inspect, verify, quality, merge and relayout.
enum class Reach { mount, store };

struct Setting {
  std::string_view name;      // its -o option, YAML key and key in /.fidelity/config
  std::string_view expected;  // what it takes, in error messages ("1..1024")
  std::string_view values;    // what it takes, in the docs (Markdown: "`1`..`1024`", "BYTES")
  // The docs' default when Settings{}'s value stands for something else ("" for "the system's
  // CAs"); empty: the default is Settings{}'s value, rendered (default_doc).
  std::string_view unset;
  std::string_view about;     // what it does (Markdown; "Name" names a section of docs/MOUNT.md)
  bool bytes;                 // a byte count: its docs show 10GiB, its JSON the number
  Reach reach;
  bool (*parse)(std::string_view text, CommonSettings& into);  // false: not a valid value
  // s.X = opts.X, else cfg.X, else s.X as it is (Settings{}'s default when s comes from merge).
  void (*merge)(const CommonSettings& opts, const CommonSettings& cfg, Settings& s);
  SettingValue (*value)(const Settings& s);
};

std::span<const Setting> settings_table();
const Setting* find_setting(std::string_view name);
// "a, b, c": the rows' names (those a store command takes, with store_only), for messages.
std::string setting_names(bool store_only = false);

// A value as the docs and -o write it: a byte count in its largest exact unit ("10GiB"), a
// number, or the text. parse reads it back as the same value.
std::string value_text(const Setting& row, const SettingValue& v);
// The docs' default: value_text of Settings{}'s value in backticks, or row.unset.
std::string default_doc(const Setting& row);
// "10GiB", "256MiB", "1536" (no exact unit): parse_bytes reads it back.
std::string bytes_text(uint64_t bytes);
// A whole number in lo..hi; nullopt otherwise.
std::optional<unsigned> parse_in_range(std::string_view s, uint64_t lo, uint64_t hi);

// One comma-separated -o list of a store command (inspect, verify, quality, merge, relayout): only
// the Reach::store settings; EINVAL "unknown option 'x' (known: ...)", or parse_mount_options's.
fid::Status parse_store_options(std::string_view list, MountOptions& opts);

}  // namespace fid::config
