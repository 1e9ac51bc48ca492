// The mount's counters in the Prometheus text exposition format (version 0.0.4), for
// /.fidelity/metrics: what node_exporter's textfile collector or any scraper reads. Text only:
// Telemetry gathers the values, this file formats them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/readings.h"

namespace fid::core {

// A histogram of read latencies: one relaxed atomic increment per read, so that the read path
// pays almost nothing for it.
class LatencyHistogram {
 public:
  // Upper bounds in seconds, from a page-cache-speed read to a stalled remote store.
  static constexpr std::array<double, 16> kBounds = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,   0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   10.0};
  void observe(std::chrono::nanoseconds d);

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> cumulative{};  // count <= each bound, then +Inf
    double sum_seconds = 0;
  };
  Snapshot snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Writes metric families: a # HELP and # TYPE line, then its samples, each carrying the
// writer's constant labels (the mount point) before its own.
class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string_view, std::string>>;
  explicit MetricsText(Labels constant);

  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, double value, const Labels& labels = {});
  // A counter or gauge family with one sample.
  void counter(std::string_view name, std::string_view help, double value);
  void gauge(std::string_view name, std::string_view help, double value);
  void histogram(std::string_view name, std::string_view help, const LatencyHistogram::Snapshot& h);
  // Every reading that has a metric name: one family per name, in the order of its first
  // reading, its samples (the readings' labels) after its # TYPE line.
  void readings(const Readings& all);

  const std::string& text() const { return out_; }

 private:
  std::string labels_text(const Labels& labels) const;
  Labels constant_;
  std::string out_;
};

// A label value or help text escaped as the format requires.
std::string escape_label_value(std::string_view v);

}  // namespace fid::core
