// config::mount_option_docs(), which the man pages, the -o help, the bash completion and
// docs/MOUNT.md's options table are generated from, names exactly the settings the parsers take.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "config/config.h"

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
