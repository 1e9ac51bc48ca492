// Unit tests for the parts of the command line that are not option parsing or printing:
// cli/parallel (the worker pool of verify and quality) and cli/quality_measure (what quality
// samples and measures, and the rules it suggests).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cli/parallel.h"
#include "cli/quality_measure.h"
#include "config/config.h"
#include "storage/local_record_source.h"
#include "test_result.h"
#include "test_store_fixture.h"

namespace fid::cli {
namespace {

TEST(CliParallel, EveryItemOnceWithAThreadsOwnBuffer) {
  for (unsigned jobs : {0u, 1u, 3u, 16u}) {
    std::vector<std::atomic<int>> seen(1000);
    std::mutex mu;
    std::set<std::thread::id> threads;
    ProgressLine line(ProgressMode::off, "test");
    for_each_parallel(
        seen.size(), jobs,
        [&](size_t i, std::vector<uint8_t>& buffer) -> uint64_t {
          buffer.push_back(1);  // a thread's buffer keeps what its earlier items left
          seen[i]++;
          std::lock_guard lock(mu);
          threads.insert(std::this_thread::get_id());
          return buffer.size();
        },
        line);
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "item " << i << " jobs " << jobs;
    if (jobs) {
      EXPECT_LE(threads.size(), jobs);
    }
  }
}

TEST(CliParallel, NoItems) {
  ProgressLine line(ProgressMode::off, "test");
  bool called = false;
  for_each_parallel(
      0, 4,
      [&](size_t, std::vector<uint8_t>&) -> uint64_t {
        called = true;
        return 0;
      },
      line);
  EXPECT_FALSE(called);
}

TEST(CliQuality, ClassIsTheTopLevelFolder) {
  EXPECT_EQ(class_of("n01440764/a.JPEG"), "n01440764");
  EXPECT_EQ(class_of("train/n01/a.JPEG"), "train");
  EXPECT_EQ(class_of("a.JPEG"), "");
}

TEST(CliQuality, ClassRulesMatchTheirClassOnly) {
  std::vector<config::Rule> rules = {class_rule("n01", 3), class_rule("we*ird [x]", config::kFull), class_rule("", 2)};
  EXPECT_EQ(config::rules_yaml(rules),
            "rules:\n"
            "  - {path: \"n01/**\", scan_group: 3}\n"
            "  - {path: \"we\\\\*ird \\\\[x\\\\]/**\", scan_group: full}\n"
            "  - {path: \"*\", scan_group: 2}\n");
  config::Config cfg = testutil::value_or_throw(config::parse_config(config::rules_yaml(rules), "rules.yaml"));
  ASSERT_EQ(cfg.rules.size(), 3u);
  EXPECT_TRUE(config::glob_match(cfg.rules[0].glob, "n01/sub/a.JPEG"));
  EXPECT_FALSE(config::glob_match(cfg.rules[0].glob, "n012/a.JPEG"));
  EXPECT_TRUE(config::glob_match(cfg.rules[1].glob, "we*ird [x]/a.JPEG"));
  EXPECT_FALSE(config::glob_match(cfg.rules[1].glob, "weXird x/a.JPEG"));
  EXPECT_TRUE(config::glob_match(cfg.rules[2].glob, "a.JPEG"));
  EXPECT_FALSE(config::glob_match(cfg.rules[2].glob, "n01/a.JPEG"));
  EXPECT_EQ(cfg.rules[1].level, config::kFull);
}

class CliQualityStore : public testutil::PackedStore {};

TEST_F(CliQualityStore, MeasuresASampleInStorageOrder) {
  const std::vector<uint32_t> jpegs = jpeg_ids(store());
  EXPECT_EQ(jpegs.size(), 16u);
  for (uint32_t id : jpegs) EXPECT_EQ(store().files()[id].kind, index::FileKind::jpeg);
  const std::vector<uint32_t> sample = storage_ordered_sample(store(), jpegs, 6, 1);
  ASSERT_EQ(sample.size(), 6u);
  for (size_t i = 1; i < sample.size(); ++i)
    EXPECT_LT(store().storage_position(store().files()[sample[i - 1]]), store().storage_position(store().files()[sample[i]]));

  storage::LocalRecordSource source(store());
  ProgressLine line(ProgressMode::off, "test");
  const std::vector<MeasuredFile> measured = measure_files(store(), source, sample, 2, line);
  ASSERT_EQ(measured.size(), sample.size());
  const auto levels = static_cast<size_t>(store().levels());
  for (size_t i = 0; i < measured.size(); ++i) {
    const MeasuredFile& m = measured[i];
    if (i > 0) {
      EXPECT_LT(measured[i - 1].path, m.path);
    }
    EXPECT_EQ(m.error, "") << m.path;
    ASSERT_EQ(m.levels.bytes.size(), levels);
    ASSERT_EQ(m.levels.scores.size(), levels);
    EXPECT_EQ(m.levels.scores.back().msssim, 1.0);  // level L is full itself
    EXPECT_LT(m.levels.bytes.front(), m.levels.bytes.back());
    EXPECT_LT(m.levels.scores.front().msssim, 1.0) << m.path;
  }
}

}  // namespace
}  // namespace fid::cli
