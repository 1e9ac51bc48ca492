#include "cli/store_options.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cli/commands.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s) {
  storage::StoreOptions o;
  o.s3.endpoint = s.endpoint;
  o.s3.region = s.region;
  o.s3.profile = s.profile;
  o.s3.addressing = s.addressing == config::Addressing::path       ? storage::Addressing::path
                    : s.addressing == config::Addressing::virtual_ ? storage::Addressing::virtual_host
                                                                   : storage::Addressing::auto_;
  o.ca_file = s.ca_file;
  o.disk_cache = s.disk_cache;
  o.disk_cache_size = s.disk_cache_size;
  o.max_requests = s.remote_requests;
  return o;
}

namespace {

std::filesystem::path temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// A file name part for `url`: its characters that are safe in one, then a hash of the whole, so
// that URLs differing only in what is replaced or cut get names of their own.
std::string url_tag(const storage::StoreUrl& url) {
  std::string tag;
  for (char c : url.text.substr(0, 120)) tag += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return fmt::format("{}-{:016x}", tag, XXH3_64bits(url.text.data(), url.text.size()));  // stable across builds
}

}  // namespace

std::filesystem::path scratch_store(std::string_view command, const storage::StoreUrl& url) {
  return temp_dir() / fmt::format("fidelityfs-{}-{}", command, url_tag(url));
}

Result<ScratchLock> ScratchLock::take(const storage::StoreUrl& url) {
  const std::filesystem::path file = temp_dir() / fmt::format("fidelityfs-{}.lock", url_tag(url));
  // The holder removes the file before it lets go: a lock taken on a file no longer at the path
  // (or another file there now) is taken again on the one there.
  for (;;) {
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd.get() < 0)
      return Error{errno, fmt::format("{}: cannot create the lock file {}: {}", url.text, file.string(), std::strerror(errno))};
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK)
        return Error{EBUSY, fmt::format("{}: another pack or merge to this store is running (it holds {})", url.text,
                                        file.string())};
      return Error{errno, fmt::format("{}: cannot lock {}: {}", url.text, file.string(), std::strerror(errno))};
    }
    struct stat held {}, there {};
    if (::fstat(fd.get(), &held) == 0 && ::stat(file.c_str(), &there) == 0 && held.st_dev == there.st_dev &&
        held.st_ino == there.st_ino)
      return ScratchLock(file, std::move(fd));
  }
}

ScratchLock::~ScratchLock() {
  if (fd_.get() >= 0) (void)::unlink(file_.c_str());  // before the close lets go of the lock
}

Result<config::Settings> parse_store_location_options(const std::vector<std::string>& lists) {
  static constexpr std::array<std::string_view, 6> kAllowed = {"endpoint", "region",  "profile",
                                                               "addressing", "ca_file", "remote_requests"};
  config::MountOptions opts;
  for (const std::string& list : lists) {
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string_view item = std::string_view(list).substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? list.size() + 1 : comma + 1;
      if (item.empty()) continue;
      std::string_view name = item.substr(0, item.find('='));
      if (std::find(kAllowed.begin(), kAllowed.end(), name) == kAllowed.end())
        return Error{EINVAL, fmt::format("unknown option '{}' (known: endpoint, region, profile, addressing, "
                                         "ca_file, remote_requests)", name)};
    }
    if (Status parsed = config::parse_mount_options(list, opts); !parsed) return std::move(parsed).error();
  }
  return config::merge(config::Config{}, opts);
}

std::optional<storage::OpenedStore> open_command_store(std::string_view command, const std::string& location,
                                                       const std::vector<std::string>& options, int& exit_code,
                                                       bool direct_io) {
  Result<config::Settings> settings = parse_store_location_options(options);
  if (!settings) {
    fmt::print(stderr, "fidelityfs {}: {}\n", command, settings.error().message);
    exit_code = kExitUsage;
    return std::nullopt;
  }
  storage::StoreOptions opts = store_options(*settings);
  opts.direct_io = direct_io;
  Result<storage::OpenedStore> opened = storage::open_store(location, opts);
  if (!opened) {
    fmt::print(stderr, "fidelityfs {}: {}\n", command, opened.error().message);
    exit_code = kExitRuntime;
    return std::nullopt;
  }
  return std::move(opened).value();
}

}  // namespace fid::cli
