#include "core/request_errors.h"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/log.h"

namespace fid::core {

std::string_view request_name(Request r) {
  static constexpr std::string_view kNames[] = {
      "lookup", "getattr", "access", "open",    "read",    "opendir",  "readdir", "statfs",
      "getxattr", "listxattr", "setxattr", "removexattr", "setattr", "mknod", "mkdir", "unlink",
      "rmdir", "symlink", "rename", "link", "write", "create", "fallocate", "readlink"};
  static_assert(std::size(kNames) == kRequestKinds);
  return kNames[static_cast<size_t>(r)];
}

config::LogLevel failure_log_level(Request r, int code) {
  // A read's failure is logged by the read path once per file, with the piece and the cause.
  if (r == Request::read) return config::LogLevel::debug;
  // A refused level change (EPERM) is logged by ChangeAccess, once per user, and a write of any
  // other attribute is EROFS like every write; any other failure of one was asked for by someone
  // who wants to know why (a bad value, an unknown fidelity attribute).
  if ((r == Request::setxattr || r == Request::removexattr) && code != EPERM && code != EROFS && code != EIO)
    return config::LogLevel::info;
  switch (code) {
    case ENOENT: case ENODATA: case ERANGE: case EROFS: case ENOTDIR: case EISDIR: case EEXIST: case EACCES:
    case EPERM: case EINVAL: case ENOTSUP:
      return config::LogLevel::debug;
    default:
      return config::LogLevel::warn;
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
  const config::LogLevel level = failure_log_level(r, e.code);
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
