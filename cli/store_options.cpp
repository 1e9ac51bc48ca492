#include "cli/store_options.h"

#include <fmt/format.h>

#include "cli/commands.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s) {
  storage::StoreOptions o;
  o.s3.endpoint = s.endpoint;
  o.s3.region = s.region;
  o.s3.profile = s.profile;
  o.s3.addressing = s.addressing == config::Addressing::path       ? net::Addressing::path
                    : s.addressing == config::Addressing::virtual_ ? net::Addressing::virtual_host
                                                                   : net::Addressing::auto_;
  o.ca_file = s.ca_file;
  o.disk_cache = s.disk_cache;
  o.disk_cache_size = s.disk_cache_size;
  o.max_requests = s.remote_requests;
  return o;
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
                                                       bool direct_io, const std::atomic<bool>* cancel) {
  Result<config::Settings> settings = parse_store_location_options(options);
  if (!settings) {
    fmt::print(stderr, "fidelityfs {}: {}\n", command, settings.error().message);
    exit_code = kExitUsage;
    return std::nullopt;
  }
  storage::StoreOptions opts = store_options(*settings);
  opts.direct_io = direct_io;
  opts.cancel = cancel;
  Result<storage::OpenedStore> opened = storage::open_store(location, opts);
  if (!opened) {
    fmt::print(stderr, "fidelityfs {}: {}\n", command, opened.error().message);
    exit_code = kExitRuntime;
    return std::nullopt;
  }
  return std::move(opened).value();
}

}  // namespace fid::cli
