#include "config/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "common/ascii.h"
#include "common/numbers.h"
#include "config/settings_table.h"

namespace fid::config {

std::optional<int> parse_level(std::string_view s) {
  if (ascii_iequals(s, "full")) return kFull;
  auto v = parse_u64(s);
  if (!v || *v < 1 || *v > static_cast<uint64_t>(kMaxLevel)) return std::nullopt;
  return static_cast<int>(*v);
}

std::string level_text(int level) { return level >= kFull ? "full" : std::to_string(level); }

std::optional<uint64_t> parse_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  auto num = parse_u64(s.substr(0, i));
  if (!num) return std::nullopt;
  std::string_view unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  std::string u(unit);
  for (char& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (u.empty() || u == "b") shift = 0;
  else if (u == "k" || u == "kb" || u == "kib") shift = 10;
  else if (u == "m" || u == "mb" || u == "mib") shift = 20;
  else if (u == "g" || u == "gb" || u == "gib") shift = 30;
  else if (u == "t" || u == "tb" || u == "tib") shift = 40;
  else return std::nullopt;
  if (shift && (*num >> (64 - shift)) != 0) return std::nullopt;
  return *num << shift;
}

// ---- YAML ------------------------------------------------------------------------------------

namespace {

std::string key_name(const YAML::Node& key) { return key.IsScalar() ? key.Scalar() : std::string("?"); }

std::optional<LogLevel> parse_log_level(std::string_view s) {
  if (ascii_iequals(s, "error")) return LogLevel::error;
  if (ascii_iequals(s, "warn") || ascii_iequals(s, "warning")) return LogLevel::warn;
  if (ascii_iequals(s, "info")) return LogLevel::info;
  if (ascii_iequals(s, "debug")) return LogLevel::debug;
  return std::nullopt;
}

int line_of(const YAML::Node& n) { return n.Mark().line >= 0 ? n.Mark().line + 1 : 0; }

// Reads the settings of one YAML document; each failure names the file, the line of the key (`at`:
// the key's node, or a list entry's) and the key.
struct Ctx {
  const std::string& source;
  Error fail(const YAML::Node& at, const std::string& key, const std::string& why) const {
    return Error{EINVAL, fmt::format("{}:{}: key '{}': {}", source, line_of(at), key, why)};
  }
  Result<std::string> scalar(const YAML::Node& n, const std::string& key, const YAML::Node& at) const {
    if (!n.IsScalar()) return fail(at, key, "expected a single value");
    return n.Scalar();
  }
  Result<int> level(const YAML::Node& n, const std::string& key, const YAML::Node& at) const {
    Result<std::string> s = scalar(n, key, at);
    if (!s) return std::move(s).error();
    auto v = parse_level(*s);
    if (!v) return fail(at, key, fmt::format("expected {}, got '{}'", find_setting("scan_group")->expected, *s));
    return *v;
  }
  // YAML forbids a key twice in one mapping (yaml-cpp keeps both): the second is an error.
  Status once(std::map<std::string, int>& seen, const YAML::Node& keyn, const std::string& key) const {
    auto [it, first] = seen.emplace(key, line_of(keyn));
    if (first) return {};
    return fail(keyn, key, fmt::format("given twice (first on line {})", it->second));
  }
};

// A key of the settings' table: one scalar, parsed as -o parses it.
Status read_common(const Ctx& ctx, const Setting& common, const std::string& key, const YAML::Node& keyn,
                   const YAML::Node& val, Config& cfg) {
  Result<std::string> s = ctx.scalar(val, key, keyn);
  if (!s) return std::move(s).error();
  if (!common.parse(*s, cfg)) return ctx.fail(keyn, key, fmt::format("expected {}, got '{}'", common.expected, *s));
  return {};
}

// order_seed or order_window.
Status read_order(const Ctx& ctx, const std::string& key, const YAML::Node& keyn, const YAML::Node& val, Config& cfg) {
  Result<std::string> s = ctx.scalar(val, key, keyn);
  if (!s) return std::move(s).error();
  if (key == "order_seed") {
    auto v = parse_u64(*s);
    if (!v) return ctx.fail(keyn, key, fmt::format("expected an unsigned 64-bit integer, got '{}'", *s));
    cfg.order_seed = *v;
    return {};
  }
  cfg.order_window = parse_in_range(*s, 1, 4096);
  if (!cfg.order_window) return ctx.fail(keyn, key, fmt::format("expected 1..4096, got '{}'", *s));
  return {};
}

// rules[i]: {path: GLOB, scan_group: LEVEL}; `rk` is "rules[i]".
Result<Rule> read_rule(const Ctx& ctx, const YAML::Node& r, const std::string& rk) {
  if (!r.IsMap()) return ctx.fail(r, rk, "expected a mapping with 'path' and 'scan_group'");
  Rule rule;
  rule.line = r.Mark().line + 1;
  bool have_path = false, have_level = false;
  std::map<std::string, int> seen;
  for (auto jt = r.begin(); jt != r.end(); ++jt) {
    const YAML::Node k = jt->first;
    const YAML::Node v = jt->second;
    const std::string name = key_name(k);
    if (Status st = ctx.once(seen, k, rk + "." + name); !st) return std::move(st).error();
    if (name == "path") {
      Result<std::string> glob = ctx.scalar(v, rk + ".path", k);
      if (!glob) return std::move(glob).error();
      if (glob->empty()) return ctx.fail(k, rk + ".path", "must not be empty");
      rule.glob = std::move(glob).value();
      have_path = true;
    } else if (name == "scan_group") {
      Result<int> level = ctx.level(v, rk + ".scan_group", k);
      if (!level) return std::move(level).error();
      rule.level = *level;
      have_level = true;
    } else {
      return ctx.fail(k, rk + "." + name, "unknown key (expected path, scan_group)");
    }
  }
  if (!have_path) return ctx.fail(r, rk + ".path", "missing");
  if (!have_level) return ctx.fail(r, rk + ".scan_group", "missing");
  return rule;
}

Status read_rules(const Ctx& ctx, const YAML::Node& keyn, const YAML::Node& val, Config& cfg) {
  if (!val.IsSequence()) return ctx.fail(keyn, "rules", "expected a list of {path, scan_group} entries");
  size_t i = 0;
  for (const auto& r : val) {
    Result<Rule> rule = read_rule(ctx, r, fmt::format("rules[{}]", i++));
    if (!rule) return std::move(rule).error();
    cfg.rules.push_back(std::move(rule).value());
  }
  return {};
}

// log: {level: LEVEL, file: FILE}
Status read_log(const Ctx& ctx, const YAML::Node& keyn, const YAML::Node& val, Config& cfg) {
  if (!val.IsMap()) return ctx.fail(keyn, "log", "expected a mapping with 'level' and/or 'file'");
  std::map<std::string, int> seen;
  for (auto jt = val.begin(); jt != val.end(); ++jt) {
    const YAML::Node k = jt->first;
    const YAML::Node v = jt->second;
    const std::string full = "log." + key_name(k);
    if (full != "log.level" && full != "log.file") return ctx.fail(k, full, "unknown key (expected level, file)");
    if (Status st = ctx.once(seen, k, full); !st) return st;
    Result<std::string> s = ctx.scalar(v, full, k);
    if (!s) return std::move(s).error();
    if (full == "log.file") {
      cfg.log_file = std::move(s).value();
      continue;
    }
    std::optional<LogLevel> level = parse_log_level(*s);
    if (!level) return ctx.fail(k, full, fmt::format("expected error, warn, info or debug, got '{}'", *s));
    cfg.log_level = *level;
  }
  return {};
}

// One top-level key and its value.
Status read_setting(const Ctx& ctx, const YAML::Node& keyn, const YAML::Node& val, Config& cfg) {
  const std::string key = key_name(keyn);
  if (const Setting* common = find_setting(key)) return read_common(ctx, *common, key, keyn, val, cfg);
  if (key == "order_seed" || key == "order_window") return read_order(ctx, key, keyn, val, cfg);
  if (key == "rules") return val.IsNull() ? Status{} : read_rules(ctx, keyn, val, cfg);
  if (key == "log") return val.IsNull() ? Status{} : read_log(ctx, keyn, val, cfg);
  return ctx.fail(keyn, key,
                  fmt::format("unknown key (expected {}, rules, order_seed, order_window, log)", setting_names()));
}

Status read_settings(const Ctx& ctx, const YAML::Node& root, Config& cfg) {
  if (root.IsNull()) return {};  // empty file: all defaults
  if (!root.IsMap())
    return Error{EINVAL, fmt::format("{}:{}: expected a mapping of settings at the top level", ctx.source,
                                     root.Mark().line + 1)};
  std::map<std::string, int> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    // Copies: it-> yields a temporary pair, so references to its members would dangle.
    const YAML::Node key = it->first;
    const YAML::Node val = it->second;
    if (Status once = ctx.once(seen, key, key_name(key)); !once) return once;
    if (Status read = read_setting(ctx, key, val, cfg); !read) return read;
  }
  return {};
}

// A double-quoted YAML scalar.
std::string yaml_quoted(std::string_view s) {
  std::string quoted = "\"";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      quoted += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      continue;
    }
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

Result<Config> parse_config(std::string_view yaml, const std::string& source) {
  Config cfg;
  cfg.source = source;
  // yaml-cpp reports malformed YAML (and a failed access to a node) by throwing YAML::Exception;
  // this is the one place that catches it, so no exception leaves config/.
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (Status read = read_settings(Ctx{source}, root, cfg); !read) return std::move(read).error();
  } catch (const YAML::Exception& e) {
    int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    return Error{EINVAL, fmt::format("{}:{}: invalid YAML: {}", source, line, e.msg)};
  }
  return cfg;
}

Result<Config> load_config(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int code = errno ? errno : EIO;
    return Error{code, fmt::format("{}: cannot read config file: {}", file.string(), std::strerror(code))};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), file.string());
}

std::string rules_yaml(const std::vector<Rule>& rules) {
  std::string y = "rules:\n";
  for (const Rule& r : rules)
    y += fmt::format("  - {{path: {}, scan_group: {}}}\n", yaml_quoted(r.glob), level_text(r.level));
  return y;
}

// ---- -o options ------------------------------------------------------------------------------

namespace {

// mount(8)'s and fstab's generic options, taken and ignored: an fstab line or a `-o ro` habit must
// not fail a mount. The tree is read-only whatever they say; the kernel's mount stays rw because
// a level changes through setxattr, which the kernel refuses on a read-only mount.
bool is_generic_mount_option(std::string_view item) {
  static constexpr std::string_view kNames[] = {
      "defaults", "rw", "ro", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail",
      "exec", "noexec", "suid", "nosuid", "dev", "nodev", "sync", "async", "atime", "noatime", "relatime",
      "norelatime", "strictatime", "nodiratime", "diratime", "lazytime", "nolazytime", "silent", "loud"};
  for (std::string_view n : kNames)
    if (ascii_iequals(item, n)) return true;
  return item.starts_with("x-") || item.starts_with("comment=") || item.starts_with("fsname=") ||
         item.starts_with("subtype=");
}

// One NAME or NAME=VALUE of a -o list.
Status parse_mount_option(std::string_view item, MountOptions& opts) {
  if (is_generic_mount_option(item)) return {};
  const size_t eq = item.find('=');
  const std::string_view name = item.substr(0, eq);
  const bool has_value = eq != std::string_view::npos;
  const std::string_view value = has_value ? item.substr(eq + 1) : std::string_view();
  const Setting* common = find_setting(name);
  if (common || name == "config") {
    if (value.empty()) return Error{EINVAL, fmt::format("mount option '{}' needs a value ({}=...)", name, name)};
    if (!common) {
      opts.config_file = std::string(value);
    } else if (!common->parse(value, opts)) {
      return Error{EINVAL,
                   fmt::format("bad value for mount option {}: '{}' (expected {})", name, value, common->expected)};
    }
    return {};
  }
  if (name == "allow_other" || name == "nonempty") {
    if (has_value) return Error{EINVAL, fmt::format("mount option '{}' takes no value", name)};
    (name == "allow_other" ? opts.allow_other : opts.nonempty) = true;
    return {};
  }
  return Error{EINVAL,
               fmt::format("unknown mount option '{}' (known: {}, config, allow_other, nonempty); mount(8)'s generic "
                           "ones (ro, rw, defaults, noauto, nofail, _netdev, x-..., ...) are taken and ignored",
                           name, setting_names())};
}

}  // namespace

Status parse_mount_options(std::string_view list, MountOptions& opts) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    if (Status parsed = parse_mount_option(item, opts); !parsed) return parsed;
  }
  return {};
}

uint64_t sequential_memory_budget(const Settings& s) {
  if (s.sequential_memory != 0) return s.sequential_memory;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const uint64_t machine = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 8ull << 30;
  return machine / 8;
}

Status check_levels(const Settings& s, int levels) {
  auto out_of_range = [&](int level, const std::string& what) -> Status {
    if (level == kFull || level <= levels) return {};
    return Error{EINVAL, fmt::format("{}: level {} is out of range: the store has {} levels (1..{} or full)", what,
                                     level, levels, levels)};
  };
  if (Status st = out_of_range(s.scan_group, "scan_group"); !st) return st;
  for (size_t i = 0; i < s.rules.size(); ++i) {
    const Rule& r = s.rules[i];
    std::string what = r.line ? fmt::format("{}:{}: rules[{}].scan_group", s.config_file, r.line, i)
                              : fmt::format("rules[{}].scan_group", i);
    if (Status st = out_of_range(r.level, what); !st) return st;
  }
  return {};
}

}  // namespace fid::config
