#include "common/log.h"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

namespace fid {

std::string_view log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: break;
  }
  return "debug";
}

namespace {
LogLevel g_level = LogLevel::info;
LogSink g_sink = LogSink::stderr_;
int g_fd = 2;
}  // namespace

Status log_open(LogLevel level, LogSink sink, const std::string& file) {
  g_level = level;
  g_sink = sink;
  if (sink == LogSink::syslog) {
    ::openlog("fidelityfs", LOG_PID, LOG_DAEMON);
  } else if (sink == LogSink::file) {
    // Never through a symbolic link: a daemon run by root must not append where another user's
    // link in a shared folder points.
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd < 0) return Error{errno, fmt::format("{}: cannot open log file: {}", file, std::strerror(errno))};
    g_fd = fd;
  } else {
    g_fd = 2;
  }
  return {};
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(g_level); }

void log_write(LogLevel level, std::string_view msg) {
  if (g_sink == LogSink::syslog) {
    int pri = level == LogLevel::error ? LOG_ERR
              : level == LogLevel::warn ? LOG_WARNING
              : level == LogLevel::info ? LOG_INFO
                                                : LOG_DEBUG;
    ::syslog(pri, "%.*s", static_cast<int>(msg.size()), msg.data());
    return;
  }
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
  std::string line = fmt::format("{} fidelityfs[{}] {}: {}\n", ts, ::getpid(), log_level_name(level), msg);
  // One write() per line so concurrent lines do not interleave.
  ssize_t rc = ::write(g_fd, line.data(), line.size());
  (void)rc;
}

}  // namespace fid
