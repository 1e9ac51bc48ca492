#include "config/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/ascii.h"
#include "common/numbers.h"

namespace fid::config {

namespace {
std::optional<RandomReads> parse_random_reads(std::string_view s) {
  if (ascii_iequals(s, "auto")) return RandomReads::auto_;
  if (ascii_iequals(s, "records")) return RandomReads::records;
  if (ascii_iequals(s, "pieces")) return RandomReads::pieces;
  return std::nullopt;
}
std::optional<OrderRanks> parse_order_ranks(std::string_view s) {
  if (ascii_iequals(s, "stable")) return OrderRanks::stable;
  if (ascii_iequals(s, "per-epoch")) return OrderRanks::per_epoch;
  return std::nullopt;
}
std::optional<codec::ViewFormat> parse_raw_format(std::string_view s) {
  for (codec::ViewFormat f : {codec::ViewFormat::png, codec::ViewFormat::ppm, codec::ViewFormat::npy})
    if (ascii_iequals(s, codec::view_format_name(f))) return f;
  return std::nullopt;
}
std::optional<RawNames> parse_raw_names(std::string_view s) {
  if (ascii_iequals(s, "keep")) return RawNames::keep;
  if (ascii_iequals(s, "ext")) return RawNames::ext;
  return std::nullopt;
}
}  // namespace

std::optional<Encoding> parse_encoding(std::string_view s) {
  if (ascii_iequals(s, "progressive")) return Encoding::progressive;
  if (ascii_iequals(s, "sequential")) return Encoding::sequential;
  return std::nullopt;
}

namespace {
std::optional<Readdir> parse_readdir(std::string_view s) {
  if (ascii_iequals(s, "plus")) return Readdir::plus;
  if (ascii_iequals(s, "plain")) return Readdir::plain;
  if (ascii_iequals(s, "auto")) return Readdir::auto_;
  return std::nullopt;
}
}  // namespace

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

// ---- settings common to the config file and -o ---------------------------------------------

namespace {

std::optional<Gpu> parse_gpu(std::string_view s) {
  if (ascii_iequals(s, "auto")) return Gpu::auto_;
  if (ascii_iequals(s, "on")) return Gpu::on;
  if (ascii_iequals(s, "off")) return Gpu::off;
  if (ascii_iequals(s, "emulate")) return Gpu::emulate;
  return std::nullopt;
}

std::optional<LevelChangers> parse_level_changers(std::string_view s) {
  if (ascii_iequals(s, "owner")) return LevelChangers{};
  if (ascii_iequals(s, "anyone")) return LevelChangers{LevelChangers::Who::anyone, ""};
  constexpr std::string_view kGroup = "group=";
  if (!ascii_iequals(s.substr(0, kGroup.size()), kGroup) || s.size() == kGroup.size() || s.find(',') != std::string_view::npos) return std::nullopt;
  return LevelChangers{LevelChangers::Who::group, std::string(s.substr(kGroup.size()))};
}

std::optional<Addressing> parse_addressing(std::string_view s) {
  if (ascii_iequals(s, "auto")) return Addressing::auto_;
  if (ascii_iequals(s, "path")) return Addressing::path;
  if (ascii_iequals(s, "virtual")) return Addressing::virtual_;
  return std::nullopt;
}

// Any non-empty text without a comma (a -o list separates options with commas).
std::optional<std::string> parse_text(std::string_view s) {
  if (s.empty() || s.find(',') != std::string_view::npos) return std::nullopt;
  return std::string(s);
}

std::optional<unsigned> parse_in_range(std::string_view s, uint64_t lo, uint64_t hi) {
  auto v = parse_u64(s);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return static_cast<unsigned>(*v);
}

template <class T>
bool put(std::optional<T>& field, std::optional<T> value) {
  if (value) field = value;
  return value.has_value();
}

// A CommonSettings key: its name in YAML and in -o, what it accepts (for error messages), its
// documentation (MountOptionDoc's values and about) and how a value is parsed into it (false: not
// a valid value).
struct CommonKey {
  std::string_view name;
  std::string_view expected;
  std::string_view values;
  std::string_view about;
  bool (*set)(std::string_view value, CommonSettings& s);
};

static_assert(kMaxLevel == 255, "update kLevelExpected");
constexpr std::string_view kLevelExpected = "a level 1..255 or 'full'";

constexpr CommonKey kCommonKeys[] = {
    {"scan_group", kLevelExpected,
     "`1`..L or `full` (`full`)",
     "the mount's default level, see \"Levels\"",
     [](std::string_view v, CommonSettings& s) { return put(s.scan_group, parse_level(v)); }},
    {"encoding", "progressive or sequential",
     "`progressive`, `sequential` (`progressive`)",
     "how a JPEG level reads: the stored progressive scans, or one sequential scan with the same pixels that "
     "decodes faster, see \"Sequential levels\"",
     [](std::string_view v, CommonSettings& s) { return put(s.encoding, parse_encoding(v)); }},
    {"threads", "1..1024",
     "`1`..`1024` (`16`)",
     "FUSE worker threads",
     [](std::string_view v, CommonSettings& s) { return put(s.threads, parse_in_range(v, 1, 1024)); }},
    {"cache", "a byte size like 256MiB",
     "BYTES (`256MiB`)",
     "record cache budget, a number with an optional unit `K`, `M`, `G`, `T` (also `KB`/`KiB`..., any case; "
     "all powers of 1024)",
     [](std::string_view v, CommonSettings& s) { return put(s.cache_bytes, parse_bytes(v)); }},
    {"gpu", "auto, on, off or emulate",
     "`auto`, `on`, `off`, `emulate` (`auto`)",
     "where l3 files decode, see \"GPU decoding\"",
     [](std::string_view v, CommonSettings& s) { return put(s.gpu, parse_gpu(v)); }},
    {"gpu_batch", "1..4096",
     "`1`..`4096` (`64`)",
     "L3 decodes per GPU batch",
     [](std::string_view v, CommonSettings& s) { return put(s.gpu_batch, parse_in_range(v, 1, 4096)); }},
    {"gpu_deadline_us", "0..1000000 microseconds",
     "`0`..`1000000` (`1000`)",
     "longest wait of a queued decode before its batch goes, in microseconds",
     [](std::string_view v, CommonSettings& s) { return put(s.gpu_deadline_us, parse_in_range(v, 0, 1000000)); }},
    {"gpu_memory", "a byte size like 1GiB",
     "BYTES (`1GiB`)",
     "bytes the GPU path may hold, pinned host and device",
     [](std::string_view v, CommonSettings& s) { return put(s.gpu_memory, parse_bytes(v)); }},
    {"raw_format", "png, ppm or npy",
     "`png`, `ppm`, `npy` (`png`)",
     "the container an l3 file reads as, see \"Lossless images\"",
     [](std::string_view v, CommonSettings& s) { return put(s.raw_format, parse_raw_format(v)); }},
    {"raw_names", "keep or ext",
     "`keep`, `ext` (`keep`)",
     "whether an l3 file's name gets its container's extension",
     [](std::string_view v, CommonSettings& s) { return put(s.raw_names, parse_raw_names(v)); }},
    {"readdir", "plus, plain or auto",
     "`auto`, `plus`, `plain` (`auto`)",
     "how listings are answered. `auto`: the kernel chooses per listing (READDIRPLUS for a folder's first chunk, "
     "then plain); `plus`: every entry with its attributes (an inode per entry in the kernel; opening a listed file "
     "needs no LOOKUP); `plain`: names and types only (the first open of each file costs a LOOKUP)",
     [](std::string_view v, CommonSettings& s) { return put(s.readdir, parse_readdir(v)); }},
    {"endpoint", "an http:// or https:// URL",
     "URL (`AWS_ENDPOINT_URL`, the profile's `endpoint_url`, else AWS's for the region)",
     "S3 endpoint",
     [](std::string_view v, CommonSettings& s) { return put(s.endpoint, parse_text(v)); }},
    {"region", "a region name like us-east-1",
     "NAME (`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, else `us-east-1`)",
     "S3 region",
     [](std::string_view v, CommonSettings& s) { return put(s.region, parse_text(v)); }},
    {"profile", "a profile name of ~/.aws/config",
     "NAME (`AWS_PROFILE`, else `default`)",
     "profile of `~/.aws/credentials` and `~/.aws/config`",
     [](std::string_view v, CommonSettings& s) { return put(s.profile, parse_text(v)); }},
    {"addressing", "auto, path or virtual",
     "`auto`, `path`, `virtual` (`auto`)",
     "S3 request style; `auto`: virtual-hosted for AWS's endpoints, path style for any other",
     [](std::string_view v, CommonSettings& s) { return put(s.addressing, parse_addressing(v)); }},
    {"ca_file", "a PEM file of CA certificates",
     "FILE (the system's CAs)",
     "PEM file of the CAs that verify an `https://` server",
     [](std::string_view v, CommonSettings& s) { return put(s.ca_file, parse_text(v)); }},
    {"disk_cache", "a folder",
     "DIR (none)",
     "folder of the local disk cache of record prefixes, remote stores only",
     [](std::string_view v, CommonSettings& s) { return put(s.disk_cache, parse_text(v)); }},
    {"disk_cache_size", "a byte size like 100GiB",
     "BYTES (`10GiB`)",
     "the disk cache's bound",
     [](std::string_view v, CommonSettings& s) { return put(s.disk_cache_size, parse_bytes(v)); }},
    {"remote_requests", "1..1024",
     "`1`..`1024` (`64`)",
     "requests in flight at once to a remote store",
     [](std::string_view v, CommonSettings& s) { return put(s.remote_requests, parse_in_range(v, 1, 1024)); }},
    {"random_reads", "auto, records or pieces",
     "`auto`, `records`, `pieces` (`auto`)",
     "how a read of a file whose record prefix is not cached is served, see \"Random reads\"",
     [](std::string_view v, CommonSettings& s) { return put(s.random_reads, parse_random_reads(v)); }},
    {"order_ranks", "stable or per-epoch",
     "`stable`, `per-epoch` (`stable`)",
     "whether rank orders keep each rank's records for the whole run, see \"Published read orders\"",
     [](std::string_view v, CommonSettings& s) { return put(s.order_ranks, parse_order_ranks(v)); }},
    {"level_changes", "owner, anyone or group=NAME",
     "`owner`, `anyone`, `group=NAME` (`owner`)",
     "who may set or remove `user.fidelity.*` attributes (levels, the order seed) besides the user who mounted and "
     "root (nobody, every user, or the group's members), see \"Security\"",
     [](std::string_view v, CommonSettings& s) { return put(s.level_changes, parse_level_changers(v)); }},
};

// "a, b, c": the keys above, for messages.
std::string common_key_names() {
  std::string out;
  for (const auto& k : kCommonKeys) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

const CommonKey* find_common_key(std::string_view name) {
  for (const auto& k : kCommonKeys)
    if (k.name == name) return &k;
  return nullptr;
}

// The settings parse_config and parse_mount_options handle themselves (not CommonSettings), in
// the order docs/MOUNT.md lists them after the common ones.
constexpr MountOptionDoc kOtherSettingDocs[] = {
    {"", "rules", "list of `{path: GLOB, scan_group: LEVEL}`", "per-path levels, the first match wins, see \"Levels\""},
    {"", "order_seed", "unsigned 64-bit (the store's packing seed)", "seed of the published orders"},
    {"", "order_window", "`1`..`4096` (`4`)", "records drawn from at once in the published orders"},
    {"", "log.level", "`error`, `warn`, `info`, `debug` (`info`)", "what the daemon logs"},
    {"", "log.file", "FILE (syslog, or stderr with `-f`)", "where the daemon logs"},
    {"allow_other", "", "",
     "every user may use the mount, not only the one who mounted (FUSE's rule: non-root users need "
     "`user_allow_other` in `/etc/fuse.conf`)"},
    {"nonempty", "", "",
     "mount over a folder that is not empty, hiding its files while mounted (without it, such a folder is refused)"},
    {"config", "", "FILE", "the YAML file (the same as `--config FILE`)"},
};

}  // namespace

std::vector<MountOptionDoc> mount_option_docs() {
  std::vector<MountOptionDoc> docs;
  for (const auto& k : kCommonKeys) docs.push_back({k.name, k.name, k.values, k.about});
  docs.insert(docs.end(), std::begin(kOtherSettingDocs), std::end(kOtherSettingDocs));
  return docs;
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

// Reads the settings of one YAML document; each failure names the file, the line and the key.
struct Ctx {
  const std::string& source;
  Error fail(const YAML::Node& n, const std::string& key, const std::string& why) const {
    int line = n.Mark().line >= 0 ? n.Mark().line + 1 : 0;
    return Error{EINVAL, fmt::format("{}:{}: key '{}': {}", source, line, key, why)};
  }
  Result<std::string> scalar(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) return fail(n, key, "expected a single value");
    return n.Scalar();
  }
  Result<int> level(const YAML::Node& n, const std::string& key) const {
    Result<std::string> s = scalar(n, key);
    if (!s) return std::move(s).error();
    auto v = parse_level(*s);
    if (!v) return fail(n, key, fmt::format("expected {}, got '{}'", kLevelExpected, *s));
    return *v;
  }
};

// A key of kCommonKeys: one scalar, parsed as -o parses it.
Status read_common(const Ctx& ctx, const CommonKey& common, const std::string& key, const YAML::Node& val,
                   Config& cfg) {
  Result<std::string> s = ctx.scalar(val, key);
  if (!s) return std::move(s).error();
  if (!common.set(*s, cfg)) return ctx.fail(val, key, fmt::format("expected {}, got '{}'", common.expected, *s));
  return {};
}

// order_seed or order_window.
Status read_order(const Ctx& ctx, const std::string& key, const YAML::Node& val, Config& cfg) {
  Result<std::string> s = ctx.scalar(val, key);
  if (!s) return std::move(s).error();
  if (key == "order_seed") {
    auto v = parse_u64(*s);
    if (!v) return ctx.fail(val, key, fmt::format("expected an unsigned 64-bit integer, got '{}'", *s));
    cfg.order_seed = *v;
    return {};
  }
  cfg.order_window = parse_in_range(*s, 1, 4096);
  if (!cfg.order_window) return ctx.fail(val, key, fmt::format("expected 1..4096, got '{}'", *s));
  return {};
}

// rules[i]: {path: GLOB, scan_group: LEVEL}; `rk` is "rules[i]".
Result<Rule> read_rule(const Ctx& ctx, const YAML::Node& r, const std::string& rk) {
  if (!r.IsMap()) return ctx.fail(r, rk, "expected a mapping with 'path' and 'scan_group'");
  Rule rule;
  rule.line = r.Mark().line + 1;
  bool have_path = false, have_level = false;
  for (auto jt = r.begin(); jt != r.end(); ++jt) {
    const YAML::Node k = jt->first;
    const YAML::Node v = jt->second;
    const std::string name = key_name(k);
    if (name == "path") {
      Result<std::string> glob = ctx.scalar(v, rk + ".path");
      if (!glob) return std::move(glob).error();
      if (glob->empty()) return ctx.fail(v, rk + ".path", "must not be empty");
      rule.glob = std::move(glob).value();
      have_path = true;
    } else if (name == "scan_group") {
      Result<int> level = ctx.level(v, rk + ".scan_group");
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

Status read_rules(const Ctx& ctx, const YAML::Node& val, Config& cfg) {
  if (!val.IsSequence()) return ctx.fail(val, "rules", "expected a list of {path, scan_group} entries");
  size_t i = 0;
  for (const auto& r : val) {
    Result<Rule> rule = read_rule(ctx, r, fmt::format("rules[{}]", i++));
    if (!rule) return std::move(rule).error();
    cfg.rules.push_back(std::move(rule).value());
  }
  return {};
}

// log: {level: LEVEL, file: FILE}
Status read_log(const Ctx& ctx, const YAML::Node& val, Config& cfg) {
  if (!val.IsMap()) return ctx.fail(val, "log", "expected a mapping with 'level' and/or 'file'");
  for (auto jt = val.begin(); jt != val.end(); ++jt) {
    const YAML::Node k = jt->first;
    const YAML::Node v = jt->second;
    const std::string full = "log." + key_name(k);
    if (full != "log.level" && full != "log.file") return ctx.fail(k, full, "unknown key (expected level, file)");
    Result<std::string> s = ctx.scalar(v, full);
    if (!s) return std::move(s).error();
    if (full == "log.file") {
      cfg.log_file = std::move(s).value();
      continue;
    }
    std::optional<LogLevel> level = parse_log_level(*s);
    if (!level) return ctx.fail(v, full, fmt::format("expected error, warn, info or debug, got '{}'", *s));
    cfg.log_level = *level;
  }
  return {};
}

// One top-level key and its value.
Status read_setting(const Ctx& ctx, const YAML::Node& keyn, const YAML::Node& val, Config& cfg) {
  const std::string key = key_name(keyn);
  if (const CommonKey* common = find_common_key(key)) return read_common(ctx, *common, key, val, cfg);
  if (key == "order_seed" || key == "order_window") return read_order(ctx, key, val, cfg);
  if (key == "rules") return val.IsNull() ? Status{} : read_rules(ctx, val, cfg);
  if (key == "log") return val.IsNull() ? Status{} : read_log(ctx, val, cfg);
  return ctx.fail(keyn, key,
                  fmt::format("unknown key (expected {}, rules, order_seed, order_window, log)", common_key_names()));
}

Status read_settings(const Ctx& ctx, const YAML::Node& root, Config& cfg) {
  if (root.IsNull()) return {};  // empty file: all defaults
  if (!root.IsMap())
    return Error{EINVAL, fmt::format("{}:{}: expected a mapping of settings at the top level", ctx.source,
                                     root.Mark().line + 1)};
  for (auto it = root.begin(); it != root.end(); ++it) {
    // Copies: it-> yields a temporary pair, so references to its members would dangle.
    const YAML::Node key = it->first;
    const YAML::Node val = it->second;
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
  const CommonKey* common = find_common_key(name);
  if (common || name == "config") {
    if (value.empty()) return Error{EINVAL, fmt::format("mount option '{}' needs a value ({}=...)", name, name)};
    if (!common) {
      opts.config_file = std::string(value);
    } else if (!common->set(value, opts)) {
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
                           name, common_key_names())};
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

Settings merge(const Config& cfg, const MountOptions& opts) {
  Settings s;
  s.scan_group = opts.scan_group.value_or(cfg.scan_group.value_or(kFull));
  s.encoding = opts.encoding.value_or(cfg.encoding.value_or(s.encoding));
  s.rules = cfg.rules;
  s.threads = opts.threads.value_or(cfg.threads.value_or(s.threads));
  s.cache_bytes = opts.cache_bytes.value_or(cfg.cache_bytes.value_or(s.cache_bytes));
  s.gpu = opts.gpu.value_or(cfg.gpu.value_or(Gpu::auto_));
  s.gpu_batch = opts.gpu_batch.value_or(cfg.gpu_batch.value_or(s.gpu_batch));
  s.gpu_deadline_us = opts.gpu_deadline_us.value_or(cfg.gpu_deadline_us.value_or(s.gpu_deadline_us));
  s.gpu_memory = opts.gpu_memory.value_or(cfg.gpu_memory.value_or(s.gpu_memory));
  s.allow_other = opts.allow_other;
  s.nonempty = opts.nonempty;
  s.raw_format = opts.raw_format.value_or(cfg.raw_format.value_or(codec::ViewFormat::png));
  s.raw_names = opts.raw_names.value_or(cfg.raw_names.value_or(RawNames::keep));
  s.readdir = opts.readdir.value_or(cfg.readdir.value_or(Readdir::auto_));
  s.endpoint = opts.endpoint.value_or(cfg.endpoint.value_or(""));
  s.region = opts.region.value_or(cfg.region.value_or(""));
  s.profile = opts.profile.value_or(cfg.profile.value_or(""));
  s.addressing = opts.addressing.value_or(cfg.addressing.value_or(Addressing::auto_));
  s.ca_file = opts.ca_file.value_or(cfg.ca_file.value_or(""));
  s.disk_cache = opts.disk_cache.value_or(cfg.disk_cache.value_or(""));
  s.disk_cache_size = opts.disk_cache_size.value_or(cfg.disk_cache_size.value_or(s.disk_cache_size));
  s.remote_requests = opts.remote_requests.value_or(cfg.remote_requests.value_or(s.remote_requests));
  s.random_reads = opts.random_reads.value_or(cfg.random_reads.value_or(s.random_reads));
  s.order_ranks = opts.order_ranks.value_or(cfg.order_ranks.value_or(s.order_ranks));
  s.level_changes = opts.level_changes.value_or(cfg.level_changes.value_or(s.level_changes));
  s.order_seed = cfg.order_seed;
  s.order_window = cfg.order_window.value_or(s.order_window);
  s.log_level = cfg.log_level;
  s.log_file = cfg.log_file;
  s.config_file = cfg.source;
  return s;
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
