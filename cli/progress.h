// A one-line progress display with rate and ETA for long commands (pack, verify). Shown on a
// terminal (or when forced on), silent in logs.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace fid::cli {

enum class ProgressMode { automatic, on, off };

inline ProgressMode parse_progress_mode(const std::string& s) {
  return s == "on" ? ProgressMode::on : s == "off" ? ProgressMode::off : ProgressMode::automatic;
}

class ProgressLine {
 public:
  ProgressLine(ProgressMode mode, std::string label)
      : enabled_(mode == ProgressMode::on || (mode == ProgressMode::automatic && ::isatty(STDERR_FILENO))),
        label_(std::move(label)) {}

  void update(uint64_t done, uint64_t total, uint64_t bytes, double seconds) {
    if (!enabled_) return;
    double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
    double mbs = seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0;
    double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    auto e = static_cast<long>(eta);
    std::fprintf(stderr, "\r%s %llu/%llu files  %.0f files/s  %.1f MB/s  ETA %ld:%02ld  ", label_.c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), rate, mbs, e / 60,
                 e % 60);
    std::fflush(stderr);
    shown_ = true;
  }

  void finish() {
    if (shown_) std::fputc('\n', stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  std::string label_;
  bool shown_ = false;
};

}  // namespace fid::cli
