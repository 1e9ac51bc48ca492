#include "cli/store_options.h"

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/ascii.h"
#include "config/settings_table.h"
#include "pack/append.h"
#include "pack/s3_jobs.h"

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s) {
  storage::StoreOptions o;
  o.s3.endpoint = s.endpoint;
  o.s3.region = s.region;
  o.s3.profile = s.profile;
  o.s3.addressing = s.addressing;
  o.ca_file = s.ca_file;
  o.disk_cache = s.disk_cache;
  o.disk_cache_size = s.disk_cache_size;
  o.max_requests = s.remote_requests;
  return o;
}

Result<config::Settings> parse_store_location_options(const std::vector<std::string>& lists) {
  config::MountOptions opts;
  for (const std::string& list : lists)
    if (Status parsed = config::parse_store_options(list, opts); !parsed) return std::move(parsed).error();
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

std::vector<std::string> append_leftovers(const std::string& location, const std::vector<std::string>& options,
                                          const index::Store& store) {
  fid::Result<net::StoreUrl> url = net::parse_store_url(location);
  if (url && url->kind == net::StoreUrl::Kind::s3) {
    fid::Result<config::Settings> settings = parse_store_location_options(options);
    if (!settings) return {};
    fid::Result<std::vector<std::string>> left = pack::s3_append_leftovers(*url, store_options(*settings), store);
    return left ? std::move(left).value() : std::vector<std::string>{};
  }
  std::error_code ec;
  if ((url && url->remote()) || !std::filesystem::is_directory(location, ec)) return {};
  return pack::append_leftovers(location, store.records().size());
}

void print_append_leftovers(const std::vector<std::string>& leftovers) {
  for (const std::string& rel : leftovers)
    fmt::print("left by an interrupted append, not part of the store (the next append removes it): {}\n",
               printable(rel, 4096));
}

}  // namespace fid::cli
