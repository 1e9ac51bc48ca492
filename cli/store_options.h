// How the commands that read a store (mount, inspect, verify, quality) turn settings into
// storage::StoreOptions, and the -o list of inspect, verify and quality (store-location options
// only).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "config/config.h"
#include "storage/open_store.h"
#include "storage/url.h"

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s);

// The local scratch path where `command` (pack, merge) builds a store bound for `url`: under
// $TMPDIR, named after the URL so that the next run for the same URL clears what a killed one
// left there.
std::filesystem::path scratch_store(std::string_view command, const storage::StoreUrl& url);

// One pack or merge to a URL at a time (under one $TMPDIR): each clears the scratch folder and
// the store at the URL when it starts, so a second run would wreck the first. A non-blocking
// flock of a file beside the scratch folders, named after the URL (pack and merge share it);
// the file is removed when the lock is let go.
class ScratchLock {
 public:
  // EBUSY naming the URL when another run holds the lock.
  static Result<ScratchLock> take(const storage::StoreUrl& url);
  ScratchLock(ScratchLock&&) = default;
  ScratchLock& operator=(ScratchLock&&) = delete;
  ~ScratchLock();

  const std::filesystem::path& file() const { return file_; }

 private:
  ScratchLock(std::filesystem::path file, Fd fd) : file_(std::move(file)), fd_(std::move(fd)) {}
  std::filesystem::path file_;
  Fd fd_;
};

// Parses -o lists that may only name where and how a store is reached (endpoint, region,
// profile, addressing, ca_file, remote_requests). EINVAL naming the first bad option.
Result<config::Settings> parse_store_location_options(const std::vector<std::string>& lists);

// The preamble of inspect, verify and quality: parses their -o lists and opens STORE with them.
// On failure it prints "fidelityfs COMMAND: message" and returns nullopt with `exit_code` set:
// usage for a bad -o list, runtime for a store that does not open. direct_io: StoreOptions's.
std::optional<storage::OpenedStore> open_command_store(std::string_view command, const std::string& location,
                                                       const std::vector<std::string>& options, int& exit_code,
                                                       bool direct_io = true);

}  // namespace fid::cli
