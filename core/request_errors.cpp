#include "core/request_errors.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/log.h"

namespace fid::core {

std::string_view request_name(Request r) {
  static constexpr std::string_view kNames[] = {
      "lookup", "getattr", "access", "open",    "read",    "opendir",  "readdir", "statfs",
      "getxattr", "listxattr", "setxattr", "removexattr", "setattr", "mknod", "mkdir", "unlink",
      "rmdir", "symlink", "rename", "link", "write", "create", "fallocate", "readlink"};
  static_assert(std::size(kNames) == kRequestKinds);
  return kNames[static_cast<size_t>(r)];
}

LogLevel failure_log_level(const Error& e) {
  if (e.log_level) return *e.log_level;
  switch (e.code) {
    case ENOENT: case ENODATA: case ERANGE: case EROFS: case ENOTDIR: case EISDIR: case EEXIST: case EACCES:
    case EPERM: case EINVAL: case ENOTSUP:
      return LogLevel::debug;
    default:
      return LogLevel::warn;
  }
}

bool RequestErrors::may_log(uint64_t& left_out) {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  left_out = 0;
  if (now - window_start_ >= kWindow) {
    window_start_ = now;
    lines_ = 0;
    left_out = left_out_;
    left_out_ = 0;
  }
  if (lines_ >= kLinesPerWindow) {
    ++left_out_;
    return false;
  }
  ++lines_;
  return true;
}

void RequestErrors::failed(Request r, uint64_t ino, std::string_view detail, const Error& e) {
  counts_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
  const LogLevel level = failure_log_level(e);
  uint64_t left_out = 0;
  if (!log_enabled(level) || !may_log(left_out)) return;
  if (left_out) log_write(level, fmt::format("{} failed requests not logged (at most {} lines per {} s)", left_out,
                                             kLinesPerWindow, kWindow.count()));
  const char* name = ::strerrorname_np(e.code);
  log_write(level, fmt::format("{} inode {}{}{}: {} ({})", request_name(r), ino, detail.empty() ? "" : " ", detail,
                               e.message, name ? std::string(name) : std::to_string(e.code)));
}

void RequestErrors::add_readings(Readings& out) const {
  for (size_t r = 0; r < kRequestKinds; ++r) {
    const std::string_view op = request_name(static_cast<Request>(r));
    out.push_back({fmt::format("requests.{}", op), Reading::Kind::counter, "", "", received_[r].load()});
  }
  for (size_t r = 0; r < kRequestKinds; ++r) {
    const std::string_view op = request_name(static_cast<Request>(r));
    out.push_back({fmt::format("request_errors.{}", op), Reading::Kind::counter, "fidelityfs_request_errors_total",
                   "requests answered with an error, by FUSE operation", counts_[r].load(), {{"op", std::string(op)}}});
  }
}

}  // namespace fid::core
