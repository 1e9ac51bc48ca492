// Configuration of a mount: the YAML file (--config FILE or -o config=FILE), the -o option list
// and their merge into the effective settings. Parsing only: no FUSE, no store. The settings both
// take are rows of one table (config/settings_table.h); their defaults are Settings' member
// initializers below and nowhere else.
//
// YAML schema (every key optional; unknown keys are an error; the values are examples):
//
//   scan_group: 5            # default level for JPEGs: 1..L or "full"
//   rules:                   # per-path rules, first match wins; paths relative to the mount
//     - path: "train/**"     # glob: * and ? stay inside one path segment, ** crosses segments,
//       scan_group: 3        #       [abc] / [a-z] / [!a] character classes
//   encoding: sequential     # progressive|sequential: how a JPEG level reads
//   sequential_memory: 2GiB  # bytes the sequential re-encodings in flight may hold (default: RAM/8)
//   threads: 8               # FUSE worker threads (1..1024)
//   transport: auto          # auto|uring|dev: requests over /dev/fuse, or FUSE over io_uring (uring)
//   cache: 256MiB            # memory budget for cached record data (B, KiB, MiB, GiB, K, M, G)
//   gpu: auto                # auto|on|off: decode L3 files on a CUDA device (emulate: its code on the CPU, for tests)
//   gpu_batch: 64            # L3 decodes per GPU batch (1..4096)
//   gpu_deadline_us: 1000    # a batch goes when full or when its oldest decode waited this long
//   gpu_memory: 1GiB         # all the GPU path holds: pinned views, batch buffers
//   order_seed: 0            # seed of the published read orders (default: the store's seed)
//   order_window: 4          # records drawn from at once in the published orders (1..4096)
//   readdir: auto            # auto|plus|plain: listings as the kernel chooses, READDIRPLUS, or READDIR
//   random_reads: auto       # auto|records|pieces: a read of an uncached record loads its prefix, or its pieces
//   order_ranks: stable      # stable|per-epoch: rank orders keep each rank's records for the run, or deal anew
//   level_changes: owner     # owner|anyone|group=NAME: who may set or remove user.fidelity.* attributes
//   log:
//     level: info            # error|warn|info|debug
//     file: /var/log/x.log   # default: stderr in the foreground, syslog when daemonised
//
// Errors are fid::Error (EINVAL) with "FILE:LINE: key 'a.b': reason".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/l3_view.h"
#include "common/addressing.h"
#include "common/error.h"
#include "common/log_level.h"
#include "common/glob.h"

namespace fid::config {

using fid::glob_escape;  // the rules' globs (common/glob.h)
using fid::glob_match;

// A level as configured: 1..kMaxLevel, or kFull (resolved to the store's L at mount).
inline constexpr int kFull = 1 << 16;
inline constexpr int kMaxLevel = 255;

// emulate: the GPU path (batches, view buffers, the block kernel) run on the CPU, for tests.
enum class Gpu { auto_, on, off, emulate };
// The container of an l3 file's decoded view is a codec::ViewFormat (raw_format, named by
// codec::view_format_name); RawNames says whether the file's name gets the container's extension.
enum class RawNames { keep, ext };
std::string_view raw_names_name(RawNames n);
// How a JPEG level reads: as stored (the first k scan groups of the progressive transcode) or
// re-encoded as one sequential scan with the same pixels, which decodes faster on a CPU.
enum class Encoding { progressive, sequential };
std::string_view encoding_name(Encoding e);
std::optional<Encoding> parse_encoding(std::string_view s);
// "on" or "off" (any case): true or false; and back.
std::optional<bool> parse_on_off(std::string_view s);
std::string_view on_off_name(bool on);
// How the mount answers directory listings: READDIRPLUS (every entry with its attributes, so the
// kernel instantiates it), plain READDIR (names and types; a file gets a LOOKUP when first
// opened), or the kernel's choice (FUSE_CAP_READDIRPLUS_AUTO).
enum class Readdir { plus, plain, auto_ };
std::string_view readdir_name(Readdir r);
// How the kernel's requests reach the daemon: FUSE over io_uring (fs/fuse_uring.h) or /dev/fuse;
// auto: /dev/fuse (over io_uring a Python reader's kernel time doubles: docs/MOUNT.md); uring is
// an opt-in.
enum class Transport { auto_, uring, dev };
std::string_view transport_name(Transport t);

using fid::LogLevel;  // common/log_level.h: the log that every layer writes

// How a read of a file whose record prefix is not cached is served: by loading the record's
// prefix (records), by reading the file's own pieces (pieces), or records when the cache that
// keeps prefixes can hold everything the mount reads (auto); core/random_reads.h decides.
enum class RandomReads { auto_, records, pieces };
std::string_view random_reads_name(RandomReads r);
// How rank orders (epoch-N.rank-R-of-W) deal records to ranks: once for the whole run (stable)
// or anew every epoch (per_epoch); docs/FORMAT.md "Published read orders".
enum class OrderRanks { stable, per_epoch };
std::string_view order_ranks_name(OrderRanks r);

// Who may set or remove user.fidelity.* attributes (levels, the order seed), which change what
// every user of the mount reads: the user who mounted and root (owner), every user (anyone), or
// also the members of one group (group=NAME, resolved to a gid by the mount command).
struct LevelChangers {
  enum class Who { owner, anyone, group };
  Who who = Who::owner;
  std::string group;  // who == group: the group's name
  bool operator==(const LevelChangers&) const = default;
};
std::string level_changers_text(const LevelChangers& c);  // "owner", "anyone", "group=NAME"

std::string_view gpu_name(Gpu g);
using Addressing = fid::Addressing;  // common/addressing.h
std::string_view addressing_name(Addressing a);
using fid::log_level_name;

struct Rule {
  std::string glob;
  int level = kFull;
  int line = 0;  // 1-based line in the config file (0 when not from a file)
};

// The settings a config file and -o options both set, with the same names, values and checks:
// each is a row of config/settings_table.cpp, which parses it one way for both (nullopt: not given).
struct CommonSettings {
  std::optional<int> scan_group;
  std::optional<Encoding> encoding;
  std::optional<uint64_t> sequential_memory;
  std::optional<unsigned> threads;
  std::optional<Transport> transport;
  std::optional<uint64_t> cache_bytes;
  std::optional<Gpu> gpu;
  std::optional<unsigned> gpu_batch;
  std::optional<unsigned> gpu_deadline_us;
  std::optional<uint64_t> gpu_memory;
  std::optional<codec::ViewFormat> raw_format;
  std::optional<unsigned> video_short_side;
  std::optional<RawNames> raw_names;
  std::optional<Readdir> readdir;
  // Remote stores (s3://, http(s)://); see docs/MOUNT.md "Stores in object storage".
  std::optional<std::string> endpoint;         // S3 endpoint URL
  std::optional<std::string> region;           // S3 region
  std::optional<std::string> profile;          // AWS profile in ~/.aws
  std::optional<Addressing> addressing;        // S3 path-style or virtual-hosted requests
  std::optional<std::string> ca_file;          // PEM CA bundle for https
  std::optional<std::string> disk_cache;       // folder of the disk cache of record prefixes
  std::optional<uint64_t> disk_cache_size;     // its bound in bytes
  std::optional<unsigned> remote_requests;     // requests in flight at once
  std::optional<RandomReads> random_reads;
  std::optional<bool> clip_reads;  // on: a clip's frame read reads its whole clip run
  std::optional<bool> clip_push;   // auto (true): a clip's frames go to the kernel's page cache
  std::optional<uint64_t> clip_push_bytes;
  std::optional<OrderRanks> order_ranks;
  std::optional<LevelChangers> level_changes;
};

struct Config : CommonSettings {
  std::string source;  // file it was read from (empty: built-in defaults)
  std::vector<Rule> rules;
  std::optional<uint64_t> order_seed;
  std::optional<unsigned> order_window;
  std::optional<LogLevel> log_level;
  std::string log_file;
};

// Parses YAML text; `source` names the file in error messages (EINVAL).
fid::Result<Config> parse_config(std::string_view yaml, const std::string& source);
// Reads and parses a file; a missing/unreadable file is an Error with its errno, naming it.
fid::Result<Config> load_config(const std::filesystem::path& file);

// `rules` as the rules: block of a config file, one flow mapping per rule, for the user to paste
// into theirs; parse_config reads it back as the same rules.
std::string rules_yaml(const std::vector<Rule>& rules);

// "1".."255" or "full" (case-sensitive). nullopt if invalid.
std::optional<int> parse_level(std::string_view s);
// "1048576", "256MiB", "1G", "64k" ... nullopt if invalid or overflowing.
std::optional<uint64_t> parse_bytes(std::string_view s);
// Level as text: "full" for kFull, else the number.
std::string level_text(int level);

// The -o option list of `fidelityfs mount`.
struct MountOptions : CommonSettings {
  std::optional<std::string> config_file;
  bool allow_other = false;
  bool nonempty = false;
};

// Parses one comma-separated -o argument into `opts` (repeatable). EINVAL naming the offending
// option ("unknown mount option 'foo'", "bad value for mount option scan_group: 'x' ...").
fid::Status parse_mount_options(std::string_view list, MountOptions& opts);

// One setting of a mount as documented: docs/MOUNT.md's options table, fidelityfs-mount(8), the
// -o help and the shell completion are generated from these (`fidelityfs doc`), and they come
// from the table that parses the settings (settings_table.cpp), so the documentation names
// exactly what is parsed, and its defaults are Settings{}'s values, rendered.
struct MountOptionDoc {
  std::string_view option;    // its -o name; empty: the config file only
  std::string_view yaml_key;  // its YAML key ("log.level": key level of the log mapping); empty: -o only
  std::string values;         // what it takes and, in parentheses, its default; empty: takes no value
  std::string_view about;     // what it does
};
// Markdown in `values` and `about`: `code`; "Name" names a section of docs/MOUNT.md.
std::vector<MountOptionDoc> mount_option_docs();

// The merged settings of a mount: option > config file > default. These initializers are the
// defaults, the only place they are written: merge() starts from Settings{}, and the docs and
// `mount --help` render them from it (settings_table.h).
struct Settings {
  int scan_group = kFull;
  Encoding encoding = Encoding::progressive;
  std::vector<Rule> rules;
  unsigned threads = 16;
  Transport transport = Transport::auto_;
  uint64_t cache_bytes = 256ull << 20;
  Gpu gpu = Gpu::auto_;
  unsigned gpu_batch = 64;
  unsigned gpu_deadline_us = 1000;
  uint64_t gpu_memory = 1ull << 30;
  uint64_t sequential_memory = 0;  // 0: an eighth of the machine's memory (sequential_memory_budget)
  bool allow_other = false;
  bool nonempty = false;  // mount over a folder that holds files (hiding them)
  std::optional<uint64_t> order_seed;  // nullopt: the store's seed
  unsigned order_window = 4;
  codec::ViewFormat raw_format = codec::ViewFormat::png;
  unsigned video_short_side = 0;  // 0: a video stream's frames at their stored size
  RawNames raw_names = RawNames::keep;
  Readdir readdir = Readdir::auto_;  // scripts/bench/scale.sh: the fastest listing + first epoch at 1.28M files
  std::string endpoint, region, profile, ca_file;  // "": from the environment / ~/.aws / system CAs
  Addressing addressing = Addressing::auto_;
  std::string disk_cache;                          // "": no disk cache
  uint64_t disk_cache_size = 10ull << 30;
  unsigned remote_requests = 64;
  RandomReads random_reads = RandomReads::auto_;
  bool clip_reads = true;  // the mount's default; a file's or folder's user.fidelity.clip_reads overrides it
  bool clip_push = true;   // clip_push=auto: pushes where the kernel takes them (core/clip_pushes.h)
  uint64_t clip_push_bytes = 16ull << 20;  // the most one push sends
  OrderRanks order_ranks = OrderRanks::stable;
  LevelChangers level_changes;
  LogLevel log_level = LogLevel::info;
  std::string log_file;
  std::string config_file;
};
Settings merge(const Config& cfg, const MountOptions& opts);

// The bytes the sequential re-encodings in flight may hold: s.sequential_memory, or where it is 0
// an eighth of the machine's memory.
uint64_t sequential_memory_budget(const Settings& s);

// Checks levels against the store's level count L; EINVAL naming the setting.
fid::Status check_levels(const Settings& s, int levels);

}  // namespace fid::config
