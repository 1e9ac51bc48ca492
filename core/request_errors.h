// Requests the mount answers, as the FUSE adapter replies to them: each counted per operation
// (stats' "requests"), and those answered with an error counted per operation (stats and
// metrics) and logged with their cause, at the level the Error carries (the part that logged
// the cause says debug: the read path, once per file; Xattrs says info for a change someone
// asked for that failed). Without one: an errno a program meets in normal use (a name that is
// not there, a write to a read-only tree, a refusal) at debug, anything else, EIO first, at warn.
// At most 20 lines per 10 s are written, and the lines left out are counted in the next.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "common/error.h"
#include "common/readings.h"
#include "common/log_level.h"

namespace fid::core {

enum class Request : uint8_t {
  lookup, getattr, access, open, read, opendir, readdir, statfs, getxattr, listxattr, setxattr, removexattr,
  setattr, mknod, mkdir, unlink, rmdir, symlink, rename, link, write, create, fallocate, readlink,
};
inline constexpr size_t kRequestKinds = static_cast<size_t>(Request::readlink) + 1;
std::string_view request_name(Request r);

// The log level a failed request is logged at: the one its Error carries, else its errno's.
LogLevel failure_log_level(const Error& e);

class RequestErrors {
 public:
  // Counts one request of kind `r` received (stats' "requests": the FUSE work a read costs).
  void received(Request r) { received_[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t received_count(Request r) const { return received_[static_cast<size_t>(r)].load(std::memory_order_relaxed); }
  // Counts the failure of `r` on inode `ino` and logs it with `detail` (a name, an attribute).
  void failed(Request r, uint64_t ino, std::string_view detail, const Error& e);
  uint64_t count(Request r) const { return counts_[static_cast<size_t>(r)].load(std::memory_order_relaxed); }
  // Both counts of every operation: stats' "requests" and "request_errors" objects, the latter
  // also the metric fidelityfs_request_errors_total{op}.
  void add_readings(Readings& out) const;

 private:
  static constexpr uint32_t kLinesPerWindow = 20;
  static constexpr std::chrono::seconds kWindow{10};
  // Whether a line may be written now; `left_out` gets the lines of the window before that were not.
  bool may_log(uint64_t& left_out);

  std::array<std::atomic<uint64_t>, kRequestKinds> counts_{};
  std::array<std::atomic<uint64_t>, kRequestKinds> received_{};
  std::mutex mu_;  // the window, taken only for lines the log level lets through
  std::chrono::steady_clock::time_point window_start_{};
  uint32_t lines_ = 0;
  uint64_t left_out_ = 0;
};

}  // namespace fid::core
