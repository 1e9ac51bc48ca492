// config::mount_option_docs(), which the man pages, the -o help, the bash completion and
// docs/MOUNT.md's options table are generated from, names exactly the settings the parsers take.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <variant>

#include "config/config.h"
#include "config/settings_table.h"
#include "core/telemetry.h"

using namespace fid::config;

namespace {

// The names a parser's "unknown" message lists after `marker` up to the closing parenthesis.
std::set<std::string> listed_names(const std::string& message, const std::string& marker) {
  size_t start = message.find(marker);
  EXPECT_NE(start, std::string::npos) << message;
  if (start == std::string::npos) return {};
  start += marker.size();
  std::string list = message.substr(start, message.find(')', start) - start);
  std::set<std::string> names;
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(", ", pos);
    names.insert(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    pos = comma == std::string::npos ? list.size() + 1 : comma + 2;
  }
  return names;
}

// The message of the error `parse` returns; "" when it succeeds.
std::string error_of(const auto& parse) {
  const auto result = parse();
  return result.ok() ? "" : result.error().message;
}

}  // namespace

TEST(MountOptionDocs, EveryDocumentedOptionIsParsedAndEveryParsedOneDocumented) {
  std::set<std::string> documented;
  for (const auto& d : mount_option_docs()) {
    if (d.option.empty()) continue;
    documented.insert(std::string(d.option));
    std::string item = d.values.empty() ? std::string(d.option) : std::string(d.option) + "=?";
    MountOptions opts;
    std::string error = error_of([&] { return parse_mount_options(item, opts); });
    EXPECT_EQ(error.find("unknown mount option"), std::string::npos) << item << ": " << error;
  }
  MountOptions opts;
  std::string unknown = error_of([&] { return parse_mount_options("no_such_option=1", opts); });
  EXPECT_EQ(listed_names(unknown, "(known: "), documented);
}

TEST(MountOptionDocs, EveryDocumentedYamlKeyIsParsedAndEveryParsedOneDocumented) {
  std::set<std::string> documented_top;  // "log.level" is key level of the mapping log
  for (const auto& d : mount_option_docs()) {
    if (d.yaml_key.empty()) continue;
    std::string key(d.yaml_key);
    size_t dot = key.find('.');
    std::string yaml = dot == std::string::npos ? key + ": \"?\"\n"
                                                : key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": \"?\"\n";
    documented_top.insert(key.substr(0, dot));
    std::string error = error_of([&] { return parse_config(yaml, "c.yaml"); });
    EXPECT_EQ(error.find("unknown key"), std::string::npos) << key << ": " << error;
  }
  std::string unknown = error_of([] { return parse_config("no_such_key: 1\n", "c.yaml"); });
  EXPECT_EQ(listed_names(unknown, "unknown key (expected "), documented_top);
}

TEST(MountOptionDocs, EverySettingSaysWhatItDoesAndOnce) {
  std::set<std::string> seen;
  for (const auto& d : mount_option_docs()) {
    std::string name = d.option.empty() ? std::string(d.yaml_key) : std::string(d.option);
    EXPECT_FALSE(name.empty());
    EXPECT_FALSE(d.about.empty()) << name;
    EXPECT_TRUE(seen.insert(name).second) << name << " documented twice";
  }
  EXPECT_TRUE(seen.count("scan_group") && seen.count("rules") && seen.count("allow_other") && seen.count("config"));
}

// ---- the settings' table: one default, rendered everywhere --------------------------------

namespace {

const MountOptionDoc& doc_of(const std::vector<MountOptionDoc>& docs, std::string_view name) {
  for (const auto& d : docs)
    if (d.option == name || d.yaml_key == name) return d;
  ADD_FAILURE() << name << " has no doc";
  return docs.front();
}

// A value of every row other than its default, as -o writes it; a new row adds one here.
const std::map<std::string, std::string> kSamples = {
    {"scan_group", "3"}, {"encoding", "sequential"}, {"sequential_memory", "3MiB"}, {"threads", "7"}, {"transport", "dev"}, {"cache", "3GiB"}, {"gpu", "off"},
    {"gpu_batch", "5"}, {"gpu_deadline_us", "77"}, {"gpu_memory", "2MiB"}, {"raw_format", "npy"}, {"video_short_side", "128"},
    {"raw_names", "ext"}, {"readdir", "plain"}, {"endpoint", "http://127.0.0.1:9"}, {"region", "eu-north-1"},
    {"profile", "lab"}, {"addressing", "virtual"}, {"ca_file", "/etc/ca.pem"}, {"disk_cache", "/var/cache/f"},
    {"disk_cache_size", "5GiB"}, {"remote_requests", "9"}, {"random_reads", "pieces"}, {"clip_reads", "off"}, {"clip_push", "off"}, {"clip_push_bytes", "4MiB"},
    {"order_ranks", "per-epoch"},
    {"level_changes", "group=wheel"}};

Settings sample_settings() {
  std::string list;
  for (const auto& [name, value] : kSamples) list += (list.empty() ? "" : ",") + name + "=" + value;
  MountOptions opts;
  EXPECT_TRUE(parse_mount_options(list, opts).ok()) << list;
  return merge(Config{}, opts);
}

}  // namespace

TEST(SettingsTable, TheDocsDefaultsAreSettingsValuesRendered) {
  const Settings defaults;
  const auto docs = mount_option_docs();
  for (const Setting& row : settings_table()) {
    const MountOptionDoc& d = doc_of(docs, row.name);
    EXPECT_EQ(d.option, row.name);
    EXPECT_EQ(d.yaml_key, row.name);
    if (row.unset.empty())
      EXPECT_EQ(d.values, fmt::format("{} (`{}`)", row.values, value_text(row, row.value(defaults)))) << row.name;
    else
      EXPECT_EQ(d.values, fmt::format("{} ({})", row.values, row.unset)) << row.name;
  }
  // The three the issue names: each written once, in Settings, and shown from there.
  EXPECT_EQ(bytes_text(defaults.disk_cache_size), "10GiB");
  EXPECT_EQ(doc_of(docs, "disk_cache_size").values, "BYTES (`" + bytes_text(defaults.disk_cache_size) + "`)");
  EXPECT_EQ(doc_of(docs, "threads").values, "`1`..`1024` (`" + std::to_string(defaults.threads) + "`)");
  EXPECT_EQ(doc_of(docs, "cache").values, "BYTES (`256MiB`)");
  EXPECT_EQ(doc_of(docs, "scan_group").values, "`1`..L or `full` (`full`)");
  EXPECT_EQ(doc_of(docs, "order_window").values, "`1`..`4096` (`" + std::to_string(defaults.order_window) + "`)");
  EXPECT_EQ(doc_of(docs, "log.level").values, "`error`, `warn`, `info`, `debug` (`info`)");
}

TEST(SettingsTable, MergeStartsFromTheDefaults) {
  const Settings merged = merge(Config{}, MountOptions{});
  const Settings defaults;
  for (const Setting& row : settings_table()) EXPECT_EQ(row.value(merged), row.value(defaults)) << row.name;
  EXPECT_EQ(merged.order_window, defaults.order_window);
  EXPECT_EQ(merged.log_level, defaults.log_level);
}

TEST(SettingsTable, EveryRowRendersWhatItParses) {
  const Settings s = sample_settings();
  const Settings defaults;
  std::set<std::string> rows;
  for (const Setting& row : settings_table()) {
    rows.insert(std::string(row.name));
    ASSERT_TRUE(kSamples.count(std::string(row.name))) << row.name << ": add a sample value";
    EXPECT_EQ(value_text(row, row.value(s)), kSamples.at(std::string(row.name))) << row.name;
    EXPECT_NE(row.value(s), row.value(defaults)) << row.name << ": the sample is the default";
  }
  EXPECT_EQ(rows.size(), kSamples.size());
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1536}, uint64_t{1} << 10, uint64_t{3} << 40, (uint64_t{5} << 30) + 1})
    EXPECT_EQ(parse_bytes(bytes_text(bytes)), bytes) << bytes;
}

TEST(SettingsTable, ConfigJsonHasEveryRowWithItsValue) {
  const Settings s = sample_settings();
  const fid::core::MountFacts facts{"/s", "/m", 10, 3, "cpu", "local", "owner"};
  const auto j = nlohmann::json::parse(fid::core::config_json(s, facts));
  for (const Setting& row : settings_table()) {
    const std::string name(row.name);
    ASSERT_TRUE(j.contains(name)) << name;
    const SettingValue v = row.value(s);
    if (const auto* n = std::get_if<uint64_t>(&v)) EXPECT_EQ(j[name].get<uint64_t>(), *n) << name;
    else EXPECT_EQ(j[name].get<std::string>(), std::get<std::string>(v)) << name;
  }
  // Its keys and their order, as users and the integration tests read them.
  std::vector<std::string> keys;
  const auto ordered = nlohmann::ordered_json::parse(fid::core::config_json(s, facts));
  for (const auto& [key, value] : ordered.items()) keys.push_back(key);
  const std::vector<std::string> expected = {
      "store", "mountpoint", "config_file", "levels", "scan_group", "effective_default_level", "encoding", "rules",
      "sequential_memory", "threads", "transport", "transport_in_use", "cache", "gpu", "gpu_decoder", "gpu_batch", "gpu_deadline_us", "gpu_memory", "raw_format", "video_short_side",
      "raw_names", "readdir", "source", "endpoint", "region", "profile", "addressing", "ca_file", "disk_cache",
      "disk_cache_size", "remote_requests", "random_reads", "clip_reads", "clip_push", "clip_push_bytes", "order_ranks",
      "allow_other", "level_changes",
      "level_changers", "log"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(j["cache"], 3ull << 30);
  EXPECT_EQ(j["scan_group"], "3");
  EXPECT_EQ(j["addressing"], "virtual");
}

TEST(SettingsTable, StoreCommandsTakeTheStoreRowsOnly) {
  EXPECT_EQ(setting_names(true), "endpoint, region, profile, addressing, ca_file, remote_requests");
  MountOptions opts;
  EXPECT_EQ(error_of([&] { return parse_store_options("region=x,disk_cache=/d", opts); }),
            "unknown option 'disk_cache' (known: endpoint, region, profile, addressing, ca_file, remote_requests)");
  EXPECT_EQ(error_of([&] { return parse_store_options("ro", opts); }),
            "unknown option 'ro' (known: endpoint, region, profile, addressing, ca_file, remote_requests)");
  EXPECT_EQ(error_of([&] { return parse_store_options("remote_requests=0", opts); }),
            "bad value for mount option remote_requests: '0' (expected 1..1024)");
  EXPECT_EQ(error_of([&] { return parse_store_options("region=x,addressing=virtual", opts); }), "");
  EXPECT_EQ(opts.addressing, fid::Addressing::virtual_host);
}

// A default is written once in the product code: the table renders it everywhere else, so no
// second copy is needed (and none may drift). The fs/ entry and attribute timeout is a constant,
// not a setting, and is written once too.
TEST(SettingsTable, DefaultsAreWrittenOnceInTheProductCode) {
  const std::regex disk_cache(R"(10ull\s*<<\s*30|\{10\}\s*<<\s*30|kDefaultDiskCache)"),
      threads(R"(threads\s*=\s*16\b)"), timeout(R"(86400\.0)");
  std::map<std::string, int> count;
  for (const char* layer : {"cli", "common", "config", "core", "fs", "index", "net", "pack", "storage"}) {
    for (const auto& f : std::filesystem::directory_iterator(std::filesystem::path(FIDELITYFS_SOURCE_DIR) / layer)) {
      if (f.path().extension() != ".cpp" && f.path().extension() != ".h") continue;
      std::ifstream in(f.path());
      for (std::string line; std::getline(in, line);) {
        if (std::regex_search(line, disk_cache)) count["disk_cache_size"]++;
        if (std::regex_search(line, threads)) count["threads"]++;
        if (std::regex_search(line, timeout)) count["entry_timeout"]++;
      }
    }
  }
  EXPECT_EQ(count["disk_cache_size"], 1) << "config/config.h's Settings only";
  EXPECT_EQ(count["threads"], 1) << "config/config.h's Settings only";
  EXPECT_EQ(count["entry_timeout"], 1) << "fs/fuse_adapter.cpp's kTimeout only";
}
