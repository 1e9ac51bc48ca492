#include "core/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace fid::core {

void LatencyHistogram::observe(std::chrono::nanoseconds d) {
  const double s = std::chrono::duration<double>(d).count();
  const size_t i = static_cast<size_t>(std::lower_bound(kBounds.begin(), kBounds.end(), s) - kBounds.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(d.count(), 0)), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::snapshot() const {
  Snapshot s;
  uint64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

namespace {
// Help text escapes backslash and newline only.
std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

// Integers exactly, other values as Go's ParseFloat reads them.
std::string value_text(double v) {
  if (v >= 0 && v < 9007199254740992.0 && v == static_cast<double>(static_cast<uint64_t>(v)))
    return std::to_string(static_cast<uint64_t>(v));
  return fmt::format("{}", v);
}
}  // namespace

MetricsText::MetricsText(Labels constant) : constant_(std::move(constant)) {}

std::string MetricsText::labels_text(const Labels& labels) const {
  std::string s;
  for (const auto* set : {&constant_, &labels})
    for (const auto& [k, v] : *set) {
      s += s.empty() ? "{" : ",";
      s += fmt::format("{}=\"{}\"", k, escape_label_value(v));
    }
  return s.empty() ? s : s + "}";
}

void MetricsText::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type);
}

void MetricsText::sample(std::string_view name, double value, const Labels& labels) {
  out_ += fmt::format("{}{} {}\n", name, labels_text(labels), value_text(value));
}

void MetricsText::counter(std::string_view name, std::string_view help, double value) {
  family(name, "counter", help);
  sample(name, value);
}

void MetricsText::gauge(std::string_view name, std::string_view help, double value) {
  family(name, "gauge", help);
  sample(name, value);
}

void MetricsText::histogram(std::string_view name, std::string_view help, const LatencyHistogram::Snapshot& h) {
  family(name, "histogram", help);
  const std::string bucket = std::string(name) + "_bucket";
  for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i)
    sample(bucket, static_cast<double>(h.cumulative[i]), {{"le", fmt::format("{}", LatencyHistogram::kBounds[i])}});
  sample(bucket, static_cast<double>(h.cumulative.back()), {{"le", "+Inf"}});
  sample(std::string(name) + "_sum", h.sum_seconds);
  sample(std::string(name) + "_count", static_cast<double>(h.cumulative.back()));
}

void MetricsText::readings(const Readings& all) {
  std::vector<std::string_view> names;
  for (const Reading& r : all)
    if (!r.metric.empty() && std::find(names.begin(), names.end(), r.metric) == names.end()) names.push_back(r.metric);
  for (std::string_view name : names) {
    bool first = true;
    for (const Reading& r : all) {
      if (r.metric != name) continue;
      if (first) family(name, r.kind == Reading::Kind::counter ? "counter" : "gauge", r.help);
      first = false;
      sample(name, static_cast<double>(r.value), r.labels);
    }
  }
}

}  // namespace fid::core
