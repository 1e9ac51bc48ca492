// A counter or gauge one part of the mount reports, declared once: its key in /.fidelity/stats
// (a dot nests it in an object: "disk_cache.hits"), its Prometheus name and help (an empty name:
// in stats only), and its value now. core::Filesystem gathers every part's readings and renders
// both the stats JSON and the metrics text from them, so the two cannot disagree.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace fid {

struct Reading {
  enum class Kind { counter, gauge };
  std::string_view key;
  Kind kind = Kind::counter;
  std::string_view metric;
  std::string_view help;
  uint64_t value = 0;
};
using Readings = std::vector<Reading>;

}  // namespace fid
