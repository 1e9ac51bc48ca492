// The process's log, for every layer: stderr in the foreground, syslog when daemonised, or a
// file (config log.file). A part logs a failure where it happens, with its cause; a failure it
// reports as an Error carries the level that error should be logged at where it is answered
// (Error::log_level), so that a cause already logged is not logged twice.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/log_level.h"

namespace fid {

enum class LogSink { stderr_, syslog, file };

// Not thread-safe; call once before other threads log. The error names the file.
Status log_open(LogLevel level, LogSink sink, const std::string& file = {});
void log_write(LogLevel level, std::string_view msg);
bool log_enabled(LogLevel level);

template <typename... Args>
void log_at(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(level)) log_write(level, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::error, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::warn, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::info, f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_at(LogLevel::debug, f, std::forward<Args>(args)...);
}

// For a failure that can repeat without end (a full disk, a broken device): counts one more in
// `count` and returns the count when this one is to be logged, the 1st, 10th, 100th, ...; else 0.
inline uint64_t count_for_log(std::atomic<uint64_t>& count) {
  const uint64_t n = count.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t p = 1;
  while (p < n && p <= UINT64_MAX / 10) p *= 10;
  return p == n ? n : 0;
}

}  // namespace fid
