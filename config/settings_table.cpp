#include "config/settings_table.h"

#include <fmt/format.h>

#include <type_traits>

#include "common/ascii.h"
#include "common/numbers.h"

namespace fid::config {

std::optional<unsigned> parse_in_range(std::string_view s, uint64_t lo, uint64_t hi) {
  auto v = parse_u64(s);
  if (!v || *v < lo || *v > hi) return std::nullopt;
  return static_cast<unsigned>(*v);
}

std::optional<Encoding> parse_encoding(std::string_view s) {
  if (ascii_iequals(s, "progressive")) return Encoding::progressive;
  if (ascii_iequals(s, "sequential")) return Encoding::sequential;
  return std::nullopt;
}

std::optional<bool> parse_on_off(std::string_view s) {
  if (ascii_iequals(s, "on")) return true;
  if (ascii_iequals(s, "off")) return false;
  return std::nullopt;
}

namespace {

// ---- the values' parsers ---------------------------------------------------------------------

std::optional<bool> parse_auto_off(std::string_view s) {
  if (ascii_iequals(s, "auto")) return true;
  if (ascii_iequals(s, "off")) return false;
  return std::nullopt;
}

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
std::optional<Readdir> parse_readdir(std::string_view s) {
  if (ascii_iequals(s, "plus")) return Readdir::plus;
  if (ascii_iequals(s, "plain")) return Readdir::plain;
  if (ascii_iequals(s, "auto")) return Readdir::auto_;
  return std::nullopt;
}
std::optional<Transport> parse_transport(std::string_view s) {
  if (ascii_iequals(s, "auto")) return Transport::auto_;
  if (ascii_iequals(s, "uring")) return Transport::uring;
  if (ascii_iequals(s, "dev")) return Transport::dev;
  return std::nullopt;
}
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
  if (ascii_iequals(s, "virtual")) return Addressing::virtual_host;
  return std::nullopt;
}
// Any non-empty text without a comma (a -o list separates options with commas).
std::optional<std::string> parse_text(std::string_view s) {
  if (s.empty() || s.find(',') != std::string_view::npos) return std::nullopt;
  return std::string(s);
}
template <uint64_t Lo, uint64_t Hi>
std::optional<unsigned> in_range(std::string_view s) { return parse_in_range(s, Lo, Hi); }

// ---- a row's functions, made from its members ------------------------------------------------

SettingValue to_value(bool v) { return std::string(on_off_name(v)); }
SettingValue to_value(unsigned v) { return uint64_t{v}; }
SettingValue to_value(uint64_t v) { return v; }
SettingValue to_value(const std::string& v) { return v; }
SettingValue to_value(Encoding v) { return std::string(encoding_name(v)); }
SettingValue to_value(Gpu v) { return std::string(gpu_name(v)); }
SettingValue to_value(codec::ViewFormat v) { return std::string(codec::view_format_name(v)); }
SettingValue to_value(RawNames v) { return std::string(raw_names_name(v)); }
SettingValue to_value(Readdir v) { return std::string(readdir_name(v)); }
SettingValue to_value(Transport v) { return std::string(transport_name(v)); }
SettingValue to_value(Addressing v) { return std::string(addressing_name(v)); }
SettingValue to_value(RandomReads v) { return std::string(random_reads_name(v)); }
SettingValue to_value(OrderRanks v) { return std::string(order_ranks_name(v)); }
SettingValue to_value(const LevelChangers& v) { return level_changers_text(v); }
SettingValue scan_group_value(const Settings& s) { return level_text(s.scan_group); }  // an int, shown as a level
SettingValue sequential_memory_value(const Settings& s) { return sequential_memory_budget(s); }  // 0 shown resolved
SettingValue clip_push_value(const Settings& s) { return std::string(s.clip_push ? "auto" : "off"); }
SettingValue video_short_side_value(const Settings& s) {
  return s.video_short_side ? SettingValue{uint64_t{s.video_short_side}} : SettingValue{std::string("full")};
}
// `full` (0: the stored size) or a short side in pixels.
std::optional<unsigned> parse_short_side(std::string_view s) {
  if (s == "full") return 0u;
  return parse_in_range(s, 1, 65535);
}

template <auto Set>
SettingValue member_value(const Settings& s) { return to_value(s.*Set); }

template <auto Opt, auto Parse>
bool parse_into(std::string_view text, CommonSettings& into) {
  auto v = Parse(text);
  if (v) into.*Opt = std::move(*v);
  return v.has_value();
}

template <auto Opt, auto Set>
void merge_into(const CommonSettings& opts, const CommonSettings& cfg, Settings& s) {
  s.*Set = (opts.*Opt).value_or((cfg.*Opt).value_or(s.*Set));
}

// A row: Opt and Set are the setting's members of CommonSettings and Settings, Parse its parser.
template <auto Opt, auto Set, auto Parse, SettingValue (*Value)(const Settings&) = &member_value<Set>>
constexpr Setting row(std::string_view name, std::string_view expected, std::string_view values, std::string_view unset,
                      std::string_view about, Reach reach = Reach::mount) {
  constexpr bool bytes = std::is_same_v<decltype(Parse), decltype(&parse_bytes)>;  // the one parser of byte counts
  return Setting{name, expected, values, unset, about, bytes, reach, &parse_into<Opt, Parse>, &merge_into<Opt, Set>, Value};
}

using C = CommonSettings;
using S = Settings;

static_assert(kMaxLevel == 255, "update kLevelExpected");
constexpr std::string_view kLevelExpected = "a level 1..255 or 'full'";

// In the order of the docs and of /.fidelity/config.
constexpr Setting kSettings[] = {
    row<&C::scan_group, &S::scan_group, &parse_level, &scan_group_value>(
        "scan_group", kLevelExpected, "`1`..L or `full`", "", "the mount's default level, see \"Levels\""),
    row<&C::encoding, &S::encoding, &parse_encoding>(
        "encoding", "progressive or sequential", "`progressive`, `sequential`", "",
        "how a JPEG level reads: the stored progressive scans, or one sequential scan with the same pixels that "
        "decodes faster, see \"Sequential levels\""),
    row<&C::sequential_memory, &S::sequential_memory, &parse_bytes, &sequential_memory_value>(
        "sequential_memory", "a byte size like 2GiB", "BYTES", "an eighth of the machine's memory",
        "bytes the sequential re-encodings in flight may hold at once; one that would exceed it waits, see "
        "\"Sequential levels\""),
    row<&C::threads, &S::threads, &in_range<1, 1024>>("threads", "1..1024", "`1`..`1024`", "", "FUSE worker threads"),
    row<&C::transport, &S::transport, &parse_transport>(
        "transport", "auto, uring or dev", "`auto`, `uring`, `dev`", "",
        "how the kernel's requests reach the daemon: `uring`, FUSE over io_uring (Linux 6.14+, the fuse module's "
        "`enable_uring` on; an error where it is off); `dev`, /dev/fuse; `auto`, /dev/fuse (io_uring costs Python readers twice their kernel time). "
        "The transport in use is `transport_in_use` in /.fidelity/config and `transport` in stats"),
    row<&C::cache_bytes, &S::cache_bytes, &parse_bytes>(
        "cache", "a byte size like 256MiB", "BYTES", "",
        "record cache budget, a number with an optional unit `K`, `M`, `G`, `T` (also `KB`/`KiB`..., any case; "
        "all powers of 1024)"),
    row<&C::gpu, &S::gpu, &parse_gpu>("gpu", "auto, on, off or emulate", "`auto`, `on`, `off`, `emulate`", "",
                                      "where l3 files decode, see \"GPU decoding\""),
    row<&C::gpu_batch, &S::gpu_batch, &in_range<1, 4096>>("gpu_batch", "1..4096", "`1`..`4096`", "",
                                                          "L3 decodes per GPU batch"),
    row<&C::gpu_deadline_us, &S::gpu_deadline_us, &in_range<0, 1000000>>(
        "gpu_deadline_us", "0..1000000 microseconds", "`0`..`1000000`", "",
        "longest wait of a queued decode before its batch goes, in microseconds"),
    row<&C::gpu_memory, &S::gpu_memory, &parse_bytes>("gpu_memory", "a byte size like 1GiB", "BYTES", "",
                                                      "bytes the GPU path may hold, pinned host and device"),
    row<&C::raw_format, &S::raw_format, &parse_raw_format>("raw_format", "png, ppm or npy", "`png`, `ppm`, `npy`", "",
                                                           "the container an l3 file and a video stream's frame read as, see \"Lossless images\""),
    row<&C::video_short_side, &S::video_short_side, &parse_short_side, &video_short_side_value>(
        "video_short_side", "a short side 1..65535 or 'full'", "`1`..`65535` or `full`", "",
        "the short side a video stream's frames are served at, scaled down at decode (`full`: as stored), see "
        "\"Videos kept as video\""),
    row<&C::raw_names, &S::raw_names, &parse_raw_names>("raw_names", "keep or ext", "`keep`, `ext`", "",
                                                        "whether an l3 file's name gets its container's extension"),
    row<&C::readdir, &S::readdir, &parse_readdir>(
        "readdir", "plus, plain or auto", "`auto`, `plus`, `plain`", "",
        "how listings are answered. `auto`: the kernel chooses per listing (READDIRPLUS for a folder's first chunk, "
        "then plain); `plus`: every entry with its attributes (an inode per entry in the kernel; opening a listed file "
        "needs no LOOKUP); `plain`: names and types only (the first open of each file costs a LOOKUP, and no folder is "
        "listed ahead of its lookups)"),
    row<&C::endpoint, &S::endpoint, &parse_text>(
        "endpoint", "an http:// or https:// URL", "URL",
        "`AWS_ENDPOINT_URL`, the profile's `endpoint_url`, else AWS's for the region", "S3 endpoint", Reach::store),
    row<&C::region, &S::region, &parse_text>("region", "a region name like us-east-1", "NAME",
                                             "`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's, else `us-east-1`",
                                             "S3 region", Reach::store),
    row<&C::profile, &S::profile, &parse_text>("profile", "a profile name of ~/.aws/config", "NAME",
                                               "`AWS_PROFILE`, else `default`",
                                               "profile of `~/.aws/credentials` and `~/.aws/config`", Reach::store),
    row<&C::addressing, &S::addressing, &parse_addressing>(
        "addressing", "auto, path or virtual", "`auto`, `path`, `virtual`", "",
        "S3 request style; `auto`: virtual-hosted for AWS's endpoints, path style for any other", Reach::store),
    row<&C::ca_file, &S::ca_file, &parse_text>("ca_file", "a PEM file of CA certificates", "FILE", "the system's CAs",
                                               "PEM file of the CAs that verify an `https://` server", Reach::store),
    row<&C::disk_cache, &S::disk_cache, &parse_text>("disk_cache", "a folder", "DIR", "none",
                                                     "folder of the local disk cache of record prefixes, remote stores only"),
    row<&C::disk_cache_size, &S::disk_cache_size, &parse_bytes>("disk_cache_size", "a byte size like 100GiB", "BYTES",
                                                                "", "the disk cache's bound"),
    row<&C::remote_requests, &S::remote_requests, &in_range<1, 1024>>(
        "remote_requests", "1..1024", "`1`..`1024`", "", "requests in flight at once to a remote store", Reach::store),
    row<&C::random_reads, &S::random_reads, &parse_random_reads>(
        "random_reads", "auto, records or pieces", "`auto`, `records`, `pieces`", "",
        "how a read of a file whose record prefix is not cached is served, see \"Random reads\""),
    row<&C::clip_reads, &S::clip_reads, &parse_on_off>(
        "clip_reads", "on or off", "`on`, `off`", "",
        "whether the first read of a clip's frame whose record is not loaded reads its whole clip run at the level "
        "in one request (`on`) or only the frame (`off`); per subtree as `user.fidelity.clip_reads`, see \"Clips\""),
    row<&C::clip_push, &S::clip_push, &parse_auto_off, &clip_push_value>(
        "clip_push", "auto or off", "`auto`, `off`", "",
        "whether a clip's frames go to the kernel's page cache once its run is read, so that reading the clip costs "
        "one read request (`auto`: wherever the kernel takes them), see \"Clips\""),
    row<&C::clip_push_bytes, &S::clip_push_bytes, &parse_bytes>(
        "clip_push_bytes", "a byte size like 16MiB", "BYTES", "",
        "the most bytes of frames one read of a clip pushes to the kernel's page cache"),
    row<&C::order_ranks, &S::order_ranks, &parse_order_ranks>(
        "order_ranks", "stable or per-epoch", "`stable`, `per-epoch`", "",
        "whether rank orders keep each rank's records for the whole run, see \"Published read orders\""),
    row<&C::level_changes, &S::level_changes, &parse_level_changers>(
        "level_changes", "owner, anyone or group=NAME", "`owner`, `anyone`, `group=NAME`", "",
        "who may set or remove `user.fidelity.*` attributes (levels, the order seed) besides the user who mounted and "
        "root (nobody, every user, or the group's members), see \"Security\""),
};

}  // namespace

std::span<const Setting> settings_table() { return kSettings; }

const Setting* find_setting(std::string_view name) {
  for (const Setting& s : kSettings)
    if (s.name == name) return &s;
  return nullptr;
}

std::string setting_names(bool store_only) {
  std::string out;
  for (const Setting& s : kSettings) {
    if (store_only && s.reach != Reach::store) continue;
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

std::string bytes_text(uint64_t bytes) {
  static constexpr std::pair<int, std::string_view> kUnits[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& [shift, unit] : kUnits)
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0) return fmt::format("{}{}", bytes >> shift, unit);
  return std::to_string(bytes);
}

std::string value_text(const Setting& row, const SettingValue& v) {
  if (const auto* n = std::get_if<uint64_t>(&v)) return row.bytes ? bytes_text(*n) : std::to_string(*n);
  return std::get<std::string>(v);
}

std::string default_doc(const Setting& row) {
  if (!row.unset.empty()) return std::string(row.unset);
  return fmt::format("`{}`", value_text(row, row.value(Settings{})));
}

std::vector<MountOptionDoc> mount_option_docs() {
  const Settings defaults;
  std::vector<MountOptionDoc> docs;
  for (const Setting& s : kSettings)
    docs.push_back({s.name, s.name, fmt::format("{} ({})", s.values, default_doc(s)), s.about});
  // The settings parse_config and parse_mount_options handle themselves, not in the table.
  docs.push_back({"", "rules", "list of `{path: GLOB, scan_group: LEVEL}`", "per-path levels, the first match wins, see \"Levels\""});
  docs.push_back({"", "order_seed", "unsigned 64-bit (the store's packing seed)", "seed of the published orders"});
  docs.push_back({"", "order_window", fmt::format("`1`..`4096` (`{}`)", defaults.order_window),
                  "records drawn from at once in the published orders"});
  docs.push_back({"", "log.level", fmt::format("`error`, `warn`, `info`, `debug` (`{}`)", log_level_name(defaults.log_level)),
                  "what the daemon logs"});
  docs.push_back({"", "log.file", "FILE (syslog, or stderr with `-f`)", "where the daemon logs"});
  docs.push_back({"allow_other", "", "",
                  "every user may use the mount, not only the one who mounted (FUSE's rule: non-root users need "
                  "`user_allow_other` in `/etc/fuse.conf`)"});
  docs.push_back({"nonempty", "", "",
                  "mount over a folder that is not empty, hiding its files while mounted (without it, such a folder is "
                  "refused)"});
  docs.push_back({"config", "", "FILE", "the YAML file (the same as `--config FILE`)"});
  return docs;
}

Settings merge(const Config& cfg, const MountOptions& opts) {
  Settings s;
  for (const Setting& row : kSettings) row.merge(opts, cfg, s);
  s.rules = cfg.rules;
  s.allow_other = opts.allow_other;
  s.nonempty = opts.nonempty;
  s.order_seed = cfg.order_seed;
  s.order_window = cfg.order_window.value_or(s.order_window);
  s.log_level = cfg.log_level.value_or(s.log_level);
  s.log_file = cfg.log_file;
  s.config_file = cfg.source;
  return s;
}

Status parse_store_options(std::string_view list, MountOptions& opts) {
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = list.find(',', start);
    const std::string_view item = list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    start = comma == std::string_view::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const std::string_view name = item.substr(0, item.find('='));
    const Setting* row = find_setting(name);
    if (!row || row->reach != Reach::store)
      return Error{EINVAL, fmt::format("unknown option '{}' (known: {})", name, setting_names(true))};
  }
  return parse_mount_options(list, opts);
}

}  // namespace fid::config
