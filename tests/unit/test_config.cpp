#include <gtest/gtest.h>

#include <cerrno>

#include "config/config.h"
#include "test_result.h"

using namespace fid::config;
using fid::testutil::value_or_throw;

namespace {

// A YAML text that must parse.
Config parsed(const std::string& yaml, const std::string& source = "f.yaml") {
  return value_or_throw(parse_config(yaml, source));
}

// A -o list that must parse into `o`.
void parse_ok(const std::string& list, MountOptions& o) {
  fid::Status st = parse_mount_options(list, o);
  EXPECT_TRUE(st.ok()) << list << ": " << (st.ok() ? "" : st.error().message);
}

// The message of an error that must be EINVAL; "" when there is none.
std::string einval_message(const fid::Status& st) {
  if (st.ok()) return "";
  EXPECT_EQ(st.error().code, EINVAL) << st.error().message;
  return st.error().message;
}

}  // namespace

TEST(ConfigLevel, ParsesNumbersAndFull) {
  EXPECT_EQ(parse_level("1"), 1);
  EXPECT_EQ(parse_level("10"), 10);
  EXPECT_EQ(parse_level("full"), kFull);
  EXPECT_FALSE(parse_level("0"));
  EXPECT_FALSE(parse_level("-1"));
  EXPECT_FALSE(parse_level("5x"));
  EXPECT_FALSE(parse_level(""));
  EXPECT_EQ(parse_level("FULL"), kFull);  // keywords are case-insensitive everywhere
  EXPECT_EQ(parse_level("Full"), kFull);
  EXPECT_FALSE(parse_level("fulll"));
  EXPECT_FALSE(parse_level("256"));
  EXPECT_EQ(level_text(kFull), "full");
  EXPECT_EQ(level_text(3), "3");
}

TEST(ConfigBytes, Units) {
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("256MiB"), 256ull << 20);
  EXPECT_EQ(parse_bytes("1G"), 1ull << 30);
  EXPECT_EQ(parse_bytes("64k"), 64ull << 10);
  EXPECT_EQ(parse_bytes("2 GiB"), 2ull << 30);
  EXPECT_FALSE(parse_bytes("MiB"));
  EXPECT_FALSE(parse_bytes("12XB"));
  EXPECT_FALSE(parse_bytes("99999999999999999999"));
  EXPECT_FALSE(parse_bytes("17179869184T"));
}

TEST(Glob, Basics) {
  EXPECT_TRUE(glob_match("train/**", "train/n01/a.jpg"));
  EXPECT_TRUE(glob_match("train/**", "train/a.jpg"));
  EXPECT_FALSE(glob_match("train/**", "val/a.jpg"));
  EXPECT_TRUE(glob_match("*.jpg", "a.jpg"));
  EXPECT_FALSE(glob_match("*.jpg", "d/a.jpg"));
  EXPECT_TRUE(glob_match("**/*.jpg", "a.jpg"));
  EXPECT_TRUE(glob_match("**/*.jpg", "x/y/a.jpg"));
  EXPECT_FALSE(glob_match("**/*.jpg", "x/y/a.png"));
  EXPECT_TRUE(glob_match("*/n0?/*", "train/n01/x"));
  EXPECT_FALSE(glob_match("*/n0?/*", "train/n011/x"));
  EXPECT_TRUE(glob_match("c[ab]t/*", "cat/1"));
  EXPECT_FALSE(glob_match("c[!ab]t/*", "cat/1"));
  EXPECT_TRUE(glob_match("c[a-c]t/*", "cbt/1"));
  EXPECT_TRUE(glob_match("/train/**", "train/x"));
  EXPECT_TRUE(glob_match("a\\*b", "a*b"));
  EXPECT_FALSE(glob_match("a\\*b", "axb"));
  EXPECT_TRUE(glob_match("[", "["));  // unterminated class is a literal
  EXPECT_TRUE(glob_match("**", "anything/at/all"));
  EXPECT_FALSE(glob_match("a/**/b", "a/x/c"));
  EXPECT_TRUE(glob_match("a/**/b", "a/b"));
  EXPECT_TRUE(glob_match("a/**/b", "a/x/y/b"));
}

TEST(ConfigYaml, FullExample) {
  Config c = parsed(R"(scan_group: 5
rules:
  - path: "train/**"
    scan_group: 3
  - {path: "val/*", scan_group: full}
threads: 8
cache: 256MiB
gpu: off
log:
  level: debug
  file: /tmp/x.log
)", "cfg.yaml");
  EXPECT_EQ(c.scan_group, 5);
  ASSERT_EQ(c.rules.size(), 2u);
  EXPECT_EQ(c.rules[0].glob, "train/**");
  EXPECT_EQ(c.rules[0].level, 3);
  EXPECT_EQ(c.rules[0].line, 3);
  EXPECT_EQ(c.rules[1].level, kFull);
  EXPECT_EQ(c.threads, 8u);
  EXPECT_EQ(c.cache_bytes, 256ull << 20);
  EXPECT_EQ(c.gpu, Gpu::off);
  EXPECT_EQ(c.log_level, LogLevel::debug);
  EXPECT_EQ(c.log_file, "/tmp/x.log");
}

TEST(ConfigYaml, EmptyIsDefaults) {
  Config c = parsed("", "e.yaml");
  EXPECT_FALSE(c.scan_group);
  EXPECT_TRUE(c.rules.empty());
  Settings s = merge(c, {});
  EXPECT_EQ(s.scan_group, kFull);
}

static std::string error_of(const std::string& yaml) {
  fid::Result<Config> c = parse_config(yaml, "f.yaml");
  if (c.ok()) return "";
  EXPECT_EQ(c.error().code, EINVAL) << c.error().message;
  return c.error().message;
}

TEST(ConfigYaml, ErrorsNameKeyAndLine) {
  EXPECT_EQ(error_of("threads: 4\nscan_group: 0\n"),
            "f.yaml:2: key 'scan_group': expected a level 1..255 or 'full', got '0'");
  EXPECT_EQ(error_of("threads: 4\n\nbogus: 1\n"),
            "f.yaml:3: key 'bogus': unknown key (expected scan_group, encoding, sequential_memory, threads, transport, cache, gpu, gpu_batch, gpu_deadline_us, gpu_memory, "
            "raw_format, video_short_side, raw_names, readdir, endpoint, region, profile, addressing, ca_file, disk_cache, disk_cache_size, "
            "remote_requests, random_reads, clip_reads, clip_push, clip_push_bytes, order_ranks, level_changes, rules, order_seed, "
            "order_window, log)");
  EXPECT_NE(error_of("rules:\n  - path: a\n    scan_group: x\n").find("f.yaml:3: key 'rules[0].scan_group'"), std::string::npos);
  EXPECT_NE(error_of("rules:\n  - path: a\n").find("key 'rules[0].scan_group': missing"), std::string::npos);
  EXPECT_NE(error_of("rules:\n  - scan_group: 2\n    colour: red\n").find("f.yaml:3: key 'rules[0].colour'"), std::string::npos);
  EXPECT_NE(error_of("cache: lots\n").find("f.yaml:1: key 'cache'"), std::string::npos);
  EXPECT_NE(error_of("order_seed: -1\n").find("f.yaml:1: key 'order_seed'"), std::string::npos);
  EXPECT_NE(error_of("order_window: 0\n").find("f.yaml:1: key 'order_window'"), std::string::npos);
  EXPECT_NE(error_of("order_window: 4097\n").find("f.yaml:1: key 'order_window'"), std::string::npos);
  EXPECT_NE(error_of("threads: 0\n").find("f.yaml:1: key 'threads'"), std::string::npos);
  EXPECT_NE(error_of("gpu: maybe\n").find("key 'gpu'"), std::string::npos);
  EXPECT_NE(error_of("log:\n  level: loud\n").find("f.yaml:2: key 'log.level'"), std::string::npos);
  EXPECT_NE(error_of("scan_group: [1, 2]\n").find("key 'scan_group': expected a single value"), std::string::npos);
  EXPECT_NE(error_of("a: [1, 2\n").find("f.yaml:"), std::string::npos);
  EXPECT_NE(error_of("a: [1, 2\n").find("invalid YAML"), std::string::npos);
  EXPECT_NE(error_of("- 1\n- 2\n").find("top level"), std::string::npos);
}

// YAML forbids a key twice in a mapping: an error naming both lines, at the top level, in log and
// in a rule. An error about a key names the key's line, also where its value is empty.
TEST(ConfigYaml, AKeyGivenTwiceIsAnErrorNamingBothLines) {
  EXPECT_EQ(error_of("encoding: sequential\nthreads: 2\nencoding: progressive\n"),
            "f.yaml:3: key 'encoding': given twice (first on line 1)");
  EXPECT_EQ(error_of("scan_group: 3\nscan_group: 5\n"), "f.yaml:2: key 'scan_group': given twice (first on line 1)");
  EXPECT_EQ(error_of("log:\n  level: info\n  level: debug\n"), "f.yaml:3: key 'log.level': given twice (first on line 2)");
  EXPECT_EQ(error_of("rules:\n  - path: a\n    scan_group: 2\n    path: b\n"),
            "f.yaml:4: key 'rules[0].path': given twice (first on line 2)");
  EXPECT_EQ(error_of("rules:\n  - {path: a, scan_group: 2}\nrules:\n  - {path: b, scan_group: 3}\n"),
            "f.yaml:3: key 'rules': given twice (first on line 1)");
  EXPECT_EQ(error_of("encoding:"), "f.yaml:1: key 'encoding': expected a single value");
  EXPECT_EQ(error_of("threads: 2\nencoding:\n\n"), "f.yaml:2: key 'encoding': expected a single value");
  EXPECT_EQ(error_of("log: 3\n"), "f.yaml:1: key 'log': expected a mapping with 'level' and/or 'file'");
}

TEST(ConfigFile, MissingFileNamed) {
  fid::Result<Config> c = load_config("/nonexistent/dir/x.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, ENOENT);
  EXPECT_NE(c.error().message.find("/nonexistent/dir/x.yaml"), std::string::npos);
  EXPECT_EQ(c.error().message, "/nonexistent/dir/x.yaml: cannot read config file: No such file or directory");
}

TEST(MountOpts, ParseAll) {
  MountOptions o;
  parse_ok("scan_group=5,threads=4,cache=1GiB,allow_other,gpu=off,config=/x.yaml", o);
  EXPECT_EQ(o.scan_group, 5);
  EXPECT_EQ(o.threads, 4u);
  EXPECT_EQ(o.cache_bytes, 1ull << 30);
  EXPECT_TRUE(o.allow_other);
  EXPECT_EQ(o.gpu, Gpu::off);
  EXPECT_EQ(o.config_file, "/x.yaml");
  parse_ok("scan_group=full", o);  // repeatable, later wins
  EXPECT_EQ(o.scan_group, kFull);
  // As mount(8) does: the helper gets fstab's options, then the command line's, which override them.
  parse_ok("encoding=sequential,scan_group=3,encoding=progressive,scan_group=5", o);
  EXPECT_EQ(o.encoding, Encoding::progressive);
  EXPECT_EQ(o.scan_group, 5);
  parse_ok(",,", o);
}

static std::string opt_error(const std::string& s) {
  MountOptions o;
  return einval_message(parse_mount_options(s, o));
}

// mount(8)'s and fstab's generic options are taken and change nothing.
TEST(MountOpts, GenericMountOptionsAreIgnored) {
  MountOptions o;
  ASSERT_TRUE(parse_mount_options("ro,defaults,noatime,nofail,_netdev,x-systemd.automount,RW,scan_group=4,nosuid", o).ok());
  EXPECT_EQ(o.scan_group, 4);
  EXPECT_FALSE(o.allow_other);
  EXPECT_NE(opt_error("roo").find("unknown mount option 'roo'"), std::string::npos);
  EXPECT_NE(opt_error("roo").find("mount(8)'s generic ones (ro, rw, defaults"), std::string::npos);
}

TEST(MountOpts, Errors) {
  EXPECT_NE(opt_error("scan_group=5,frobnicate").find("unknown mount option 'frobnicate'"), std::string::npos);
  EXPECT_NE(opt_error("scan_group=0").find("scan_group"), std::string::npos);
  EXPECT_NE(opt_error("scan_group").find("needs a value"), std::string::npos);
  EXPECT_NE(opt_error("threads=abc").find("threads"), std::string::npos);
  EXPECT_NE(opt_error("cache=x").find("cache"), std::string::npos);
  EXPECT_NE(opt_error("gpu=yes").find("gpu"), std::string::npos);
  EXPECT_NE(opt_error("allow_other=1").find("takes no value"), std::string::npos);
}

TEST(Settings, PrecedenceOptionOverConfig) {
  Config c = parsed("scan_group: 3\nthreads: 2\ncache: 1MiB\n", "c.yaml");
  MountOptions o;
  parse_ok("scan_group=7", o);
  Settings s = merge(c, o);
  EXPECT_EQ(s.scan_group, 7);
  EXPECT_EQ(s.threads, 2u);
  EXPECT_EQ(s.cache_bytes, 1ull << 20);
  Settings s2 = merge(c, {});
  EXPECT_EQ(s2.scan_group, 3);
}

TEST(Settings, CheckLevelsAgainstStore) {
  Config c = parsed("scan_group: 12\n", "c.yaml");
  EXPECT_EQ(einval_message(check_levels(merge(c, {}), 10)),
            "scan_group: level 12 is out of range: the store has 10 levels (1..10 or full)");
  EXPECT_TRUE(check_levels(merge(c, {}), 12).ok());
  Config c2 = parsed("rules:\n  - {path: a, scan_group: 11}\n", "c.yaml");
  fid::Status st = check_levels(merge(c2, {}), 10);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("c.yaml:2: rules[0].scan_group"), std::string::npos);
  EXPECT_EQ(einval_message(st), "c.yaml:2: rules[0].scan_group: level 11 is out of range: the store has 10 levels "
                                "(1..10 or full)");
}

TEST(ConfigYaml, OrderSettings) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_FALSE(d.order_seed);
  EXPECT_EQ(d.order_window, 4u);
  Settings s = merge(parsed("order_seed: 18446744073709551615\norder_window: 16\n", "f.yaml"), MountOptions{});
  EXPECT_EQ(s.order_seed, std::optional<uint64_t>(18446744073709551615ull));
  EXPECT_EQ(s.order_window, 16u);
}

TEST(ConfigYaml, EncodingSetting) {
  EXPECT_EQ(merge(parsed("", "f.yaml"), MountOptions{}).encoding, fid::config::Encoding::progressive);
  Config c = parsed("encoding: sequential\n", "f.yaml");
  EXPECT_EQ(merge(c, MountOptions{}).encoding, fid::config::Encoding::sequential);
  MountOptions o;
  parse_ok("encoding=progressive", o);
  EXPECT_EQ(merge(c, o).encoding, fid::config::Encoding::progressive);  // the mount option wins
  EXPECT_EQ(opt_error("encoding=baseline"),
            "bad value for mount option encoding: 'baseline' (expected progressive or sequential)");
  EXPECT_EQ(error_of("encoding: 2\n"), "f.yaml:1: key 'encoding': expected progressive or sequential, got '2'");
}

TEST(ConfigYaml, RawViewSettings) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_EQ(d.raw_format, fid::codec::ViewFormat::png);
  EXPECT_EQ(d.raw_names, RawNames::keep);
  Config c = parsed("raw_format: npy\nraw_names: ext\n", "f.yaml");
  Settings s = merge(c, MountOptions{});
  EXPECT_EQ(s.raw_format, fid::codec::ViewFormat::npy);
  EXPECT_EQ(s.raw_names, RawNames::ext);
  MountOptions o;
  parse_ok("raw_format=ppm,raw_names=keep", o);
  Settings m = merge(c, o);  // the mount option wins over the file
  EXPECT_EQ(m.raw_format, fid::codec::ViewFormat::ppm);
  EXPECT_EQ(m.raw_names, RawNames::keep);
  EXPECT_EQ(fid::codec::view_format_name(fid::codec::ViewFormat::npy), "npy");
  EXPECT_EQ(raw_names_name(RawNames::ext), "ext");
  EXPECT_EQ(opt_error("raw_format=jpg"), "bad value for mount option raw_format: 'jpg' (expected png, ppm or npy)");
  EXPECT_EQ(opt_error("raw_names=x"), "bad value for mount option raw_names: 'x' (expected keep or ext)");
  EXPECT_EQ(opt_error("raw_format"), "mount option 'raw_format' needs a value (raw_format=...)");
  // A video stream's frames: full (0, the default) or a short side.
  EXPECT_EQ(merge(Config{}, MountOptions{}).video_short_side, 0u);
  parse_ok("video_short_side=128", o);
  EXPECT_EQ(merge(Config{}, o).video_short_side, 128u);
  parse_ok("video_short_side=full", o);
  EXPECT_EQ(merge(Config{}, o).video_short_side, 0u);
  EXPECT_NE(opt_error("video_short_side=0").find("a short side 1..65535 or 'full'"), std::string::npos);
  EXPECT_NE(opt_error("video_short_side=70000").find("a short side 1..65535 or 'full'"), std::string::npos);
  EXPECT_EQ(error_of("raw_format: tiff\n"), "f.yaml:1: key 'raw_format': expected png, ppm or npy, got 'tiff'");
}

TEST(ConfigYaml, ReaddirSetting) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_EQ(d.readdir, Readdir::auto_);  // the default
  Config c = parsed("readdir: plain\n", "f.yaml");
  EXPECT_EQ(merge(c, MountOptions{}).readdir, Readdir::plain);
  MountOptions o;
  parse_ok("readdir=auto", o);
  EXPECT_EQ(merge(c, o).readdir, Readdir::auto_);  // the mount option wins over the file
  MountOptions p;
  parse_ok("readdir=plus", p);
  EXPECT_EQ(merge(c, p).readdir, Readdir::plus);
  EXPECT_EQ(readdir_name(Readdir::plus), "plus");
  EXPECT_EQ(readdir_name(Readdir::plain), "plain");
  EXPECT_EQ(readdir_name(Readdir::auto_), "auto");
  EXPECT_EQ(opt_error("readdir=yes"), "bad value for mount option readdir: 'yes' (expected plus, plain or auto)");
  EXPECT_EQ(opt_error("readdir"), "mount option 'readdir' needs a value (readdir=...)");
  EXPECT_EQ(parsed("readdir: Plus\n", "f.yaml").readdir, Readdir::plus);
  EXPECT_EQ(error_of("readdir: Pluss\n"), "f.yaml:1: key 'readdir': expected plus, plain or auto, got 'Pluss'");
}

TEST(ConfigYaml, RemoteStoreSettings) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_EQ(d.endpoint, "");
  EXPECT_EQ(d.addressing, Addressing::auto_);
  EXPECT_EQ(d.disk_cache, "");
  EXPECT_EQ(d.disk_cache_size, 10ull << 30);
  EXPECT_EQ(d.remote_requests, 64u);
  Config c = parsed(
      "endpoint: http://127.0.0.1:7480\nregion: eu-west-1\nprofile: lab\naddressing: path\n"
      "ca_file: /etc/ca.pem\ndisk_cache: /var/cache/fid\ndisk_cache_size: 2GiB\nremote_requests: 8\n",
      "f.yaml");
  MountOptions o;
  parse_ok("region=us-west-2,disk_cache_size=1MiB", o);
  Settings s = merge(c, o);
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:7480");
  EXPECT_EQ(s.region, "us-west-2");  // the option wins
  EXPECT_EQ(s.profile, "lab");
  EXPECT_EQ(s.addressing, Addressing::path);
  EXPECT_EQ(s.ca_file, "/etc/ca.pem");
  EXPECT_EQ(s.disk_cache, "/var/cache/fid");
  EXPECT_EQ(s.disk_cache_size, 1ull << 20);
  EXPECT_EQ(s.remote_requests, 8u);
  MountOptions bad;
  EXPECT_EQ(einval_message(parse_mount_options("addressing=sideways", bad)),
            "bad value for mount option addressing: 'sideways' (expected auto, path or virtual)");
  EXPECT_EQ(einval_message(parse_mount_options("remote_requests=0", bad)),
            "bad value for mount option remote_requests: '0' (expected 1..1024)");
  EXPECT_EQ(einval_message(parse_mount_options("endpoint=", bad)), "mount option 'endpoint' needs a value (endpoint=...)");
  EXPECT_EQ(error_of("disk_cache_size: lots\n"),
            "f.yaml:1: key 'disk_cache_size': expected a byte size like 100GiB, got 'lots'");
}

TEST(ConfigYaml, RandomReadsAndOrderRanks) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_EQ(d.random_reads, RandomReads::auto_);
  EXPECT_EQ(d.order_ranks, OrderRanks::stable);
  Config c = parsed("random_reads: pieces\norder_ranks: per-epoch\n", "f.yaml");
  Settings s = merge(c, MountOptions{});
  EXPECT_EQ(s.random_reads, RandomReads::pieces);
  EXPECT_EQ(s.order_ranks, OrderRanks::per_epoch);
  MountOptions o;
  parse_ok("random_reads=records,order_ranks=stable", o);
  s = merge(c, o);  // the options win over the file
  EXPECT_EQ(s.random_reads, RandomReads::records);
  EXPECT_EQ(s.order_ranks, OrderRanks::stable);
  EXPECT_EQ(random_reads_name(RandomReads::auto_), "auto");
  EXPECT_EQ(random_reads_name(RandomReads::records), "records");
  EXPECT_EQ(random_reads_name(RandomReads::pieces), "pieces");
  EXPECT_EQ(order_ranks_name(OrderRanks::stable), "stable");
  EXPECT_EQ(order_ranks_name(OrderRanks::per_epoch), "per-epoch");
  EXPECT_EQ(opt_error("random_reads=files"),
            "bad value for mount option random_reads: 'files' (expected auto, records or pieces)");
  EXPECT_EQ(opt_error("order_ranks=per_epoch"),
            "bad value for mount option order_ranks: 'per_epoch' (expected stable or per-epoch)");
  EXPECT_EQ(opt_error("random_reads"), "mount option 'random_reads' needs a value (random_reads=...)");
  EXPECT_EQ(parsed("random_reads: Records\n", "f.yaml").random_reads, RandomReads::records);
  EXPECT_EQ(parsed("order_ranks: PER-EPOCH\n", "f.yaml").order_ranks, OrderRanks::per_epoch);
  EXPECT_EQ(error_of("random_reads: Record\n"), "f.yaml:1: key 'random_reads': expected auto, records or pieces, got 'Record'");
  EXPECT_EQ(error_of("order_ranks: epoch\n"), "f.yaml:1: key 'order_ranks': expected stable or per-epoch, got 'epoch'");
}

TEST(ConfigYaml, LevelChanges) {
  Settings d = merge(parsed("", "f.yaml"), MountOptions{});
  EXPECT_EQ(d.level_changes.who, LevelChangers::Who::owner);
  EXPECT_EQ(level_changers_text(d.level_changes), "owner");
  Config c = parsed("level_changes: anyone\n", "f.yaml");
  EXPECT_EQ(merge(c, MountOptions{}).level_changes.who, LevelChangers::Who::anyone);
  MountOptions o;
  parse_ok("level_changes=group=train", o);  // the value itself holds a '='
  Settings s = merge(c, o);  // the option wins over the file
  EXPECT_EQ(s.level_changes.who, LevelChangers::Who::group);
  EXPECT_EQ(s.level_changes.group, "train");
  EXPECT_EQ(level_changers_text(s.level_changes), "group=train");
  EXPECT_EQ(parsed("level_changes: group=ml-users\n", "f.yaml").level_changes->group, "ml-users");
  EXPECT_EQ(opt_error("level_changes=group="),
            "bad value for mount option level_changes: 'group=' (expected owner, anyone or group=NAME)");
  EXPECT_EQ(opt_error("level_changes=root"),
            "bad value for mount option level_changes: 'root' (expected owner, anyone or group=NAME)");
  EXPECT_EQ(parsed("level_changes: Anyone\n", "f.yaml").level_changes->who, LevelChangers::Who::anyone);
  EXPECT_EQ(parsed("level_changes: GROUP=ml-users\n", "f.yaml").level_changes->group, "ml-users");  // NAME as given
  EXPECT_EQ(error_of("level_changes: Owners\n"),
            "f.yaml:1: key 'level_changes': expected owner, anyone or group=NAME, got 'Owners'");
}

TEST(ConfigYaml, YamlCppExceptionsBecomeErrors) {
  // Nesting deeper than yaml-cpp allows: it throws from inside the parser (DeepRecursion).
  std::string deep = std::string(5000, '[') + std::string(5000, ']');
  std::string error = error_of("scan_group: " + deep + "\n");
  EXPECT_EQ(error.rfind("f.yaml:1: invalid YAML: ", 0), 0u) << error;
}

TEST(Glob, EscapedTextMatchesExactlyItself) {
  EXPECT_EQ(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
  EXPECT_EQ(glob_escape("n01440764"), "n01440764");
  for (std::string name : {"plain", "a*b", "q?", "[x]", "back\\slash", "x[!a]", "**"}) {
    EXPECT_TRUE(glob_match(glob_escape(name), name)) << name;
    EXPECT_TRUE(glob_match(glob_escape(name) + "/**", name + "/sub/f.jpg")) << name;
  }
  EXPECT_FALSE(glob_match(glob_escape("a*"), "ab"));
  EXPECT_FALSE(glob_match(glob_escape("?"), "x"));
  EXPECT_FALSE(glob_match(glob_escape("[ab]"), "a"));
  EXPECT_FALSE(glob_match(glob_escape("**") + "/**", "x/f.jpg"));
}

TEST(RulesYaml, OneFlowMappingPerRule) {
  EXPECT_EQ(rules_yaml({}), "rules:\n");
  std::vector<Rule> rules(2);
  rules[0].glob = "train/**";
  rules[0].level = 3;
  rules[1].glob = "*";
  rules[1].level = kFull;
  EXPECT_EQ(rules_yaml(rules), "rules:\n  - {path: \"train/**\", scan_group: 3}\n  - {path: \"*\", scan_group: full}\n");
}

TEST(RulesYaml, ReadsBackAsTheSameRules) {
  std::vector<Rule> rules(4);
  rules[0].glob = "train/**";
  rules[0].level = 1;
  rules[1].glob = "say \"hi\"\\" + glob_escape("[x]") + "/**";
  rules[1].level = 255;
  rules[2].glob = "line\nbreak\ttab/**";
  rules[2].level = kFull;
  rules[3].glob = "*";
  rules[3].level = 7;
  Config c = parsed(rules_yaml(rules));
  ASSERT_EQ(c.rules.size(), rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(c.rules[i].glob, rules[i].glob) << i;
    EXPECT_EQ(c.rules[i].level, rules[i].level) << i;
    EXPECT_EQ(c.rules[i].line, static_cast<int>(i) + 2) << i;
  }
}
