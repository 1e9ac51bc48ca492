// The Prometheus text of /.fidelity/metrics: escaping, families, and a histogram's cumulative buckets.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/metrics.h"

using fid::core::LatencyHistogram;
using fid::core::MetricsText;
using namespace std::chrono_literals;

TEST(MetricsText, FamiliesSamplesAndEscapes) {
  MetricsText m(MetricsText::Labels{{"mountpoint", "/mnt/a \"b\"\\c\nd"}});
  m.counter("x_total", "help with \\ and\nnewline", 3);
  m.family("y_total", "counter", "by kind");
  m.sample("y_total", 1, {{"kind", "jpeg"}});
  m.sample("y_total", 0.5, {{"kind", "l3"}});
  m.gauge("z", "a gauge", 18446744073709551615.0);
  EXPECT_EQ(m.text(),
            "# HELP x_total help with \\\\ and\\nnewline\n"
            "# TYPE x_total counter\n"
            "x_total{mountpoint=\"/mnt/a \\\"b\\\"\\\\c\\nd\"} 3\n"
            "# HELP y_total by kind\n"
            "# TYPE y_total counter\n"
            "y_total{mountpoint=\"/mnt/a \\\"b\\\"\\\\c\\nd\",kind=\"jpeg\"} 1\n"
            "y_total{mountpoint=\"/mnt/a \\\"b\\\"\\\\c\\nd\",kind=\"l3\"} 0.5\n"
            "# HELP z a gauge\n"
            "# TYPE z gauge\n"
            "z{mountpoint=\"/mnt/a \\\"b\\\"\\\\c\\nd\"} 1.8446744073709552e+19\n");
  MetricsText bare(MetricsText::Labels{});
  bare.counter("n_total", "no labels", 0);
  EXPECT_EQ(bare.text(), "# HELP n_total no labels\n# TYPE n_total counter\nn_total 0\n");
}

TEST(LatencyHistogram, BucketsAreCumulativeAndBoundsInclusive) {
  LatencyHistogram h;
  h.observe(10us);    // <= 50 us
  h.observe(50us);    // on the bound: counted in it
  h.observe(3ms);     // <= 5 ms
  h.observe(20s);     // past the last bound: +Inf only
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative[0], 2u);
  EXPECT_EQ(s.cumulative[5], 2u);   // <= 2.5 ms
  EXPECT_EQ(s.cumulative[6], 3u);   // <= 5 ms
  EXPECT_EQ(s.cumulative[LatencyHistogram::kBounds.size() - 1], 3u);
  EXPECT_EQ(s.cumulative.back(), 4u);
  EXPECT_NEAR(s.sum_seconds, 20.00306, 1e-9);
  MetricsText m(MetricsText::Labels{});
  m.histogram("r_seconds", "reads", s);
  const std::string& t = m.text();
  EXPECT_NE(t.find("# TYPE r_seconds histogram\n"), std::string::npos);
  EXPECT_NE(t.find("r_seconds_bucket{le=\"5e-05\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("r_seconds_bucket{le=\"0.005\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("r_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(t.find("r_seconds_count 4\n"), std::string::npos);
}
