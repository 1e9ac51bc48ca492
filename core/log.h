// The daemon's log: stderr in the foreground, syslog when daemonised, or a file (config log.file).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "common/error.h"
#include "config/config.h"

namespace fid::core {

enum class LogSink { stderr_, syslog, file };

// Not thread-safe; call once before the FUSE loop starts. The error names the file.
Status log_open(config::LogLevel level, LogSink sink, const std::string& file = {});
void log_write(config::LogLevel level, std::string_view msg);
bool log_enabled(config::LogLevel level);

template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(config::LogLevel::error)) log_write(config::LogLevel::error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(config::LogLevel::warn)) log_write(config::LogLevel::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(config::LogLevel::info)) log_write(config::LogLevel::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(config::LogLevel::debug)) log_write(config::LogLevel::debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fid::core
