// How much a log line matters: a line is written when its level is at most the log's level
// (log.level: error < warn < info < debug).
#pragma once

#include <string_view>

namespace fid {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };
// "error", "warn", "info", "debug"
std::string_view log_level_name(LogLevel l);

}  // namespace fid
