// A counter or gauge one part of the mount reports, declared once: its key in /.fidelity/stats,
// its Prometheus name and help (an empty name: in stats only), and its value now. core::Telemetry
// gathers every part's readings and renders both the stats JSON and the metrics text from them,
// so the two cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fid {

struct Reading {
  enum class Kind { counter, gauge };
  // In stats: "a" is a key, "a.b" key b of object a, "a[]" the next element of array a; empty: in
  // metrics only.
  std::string key;
  Kind kind = Kind::counter;
  std::string_view metric;
  std::string_view help;
  uint64_t value = 0;
  // The sample's labels in metrics: readings of one metric with different labels are one family.
  std::vector<std::pair<std::string_view, std::string>> labels = {};
};
using Readings = std::vector<Reading>;

}  // namespace fid
