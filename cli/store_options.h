// How the commands that read a store (mount, inspect, verify) turn settings into
// storage::StoreOptions, and the -o list of inspect and verify (store-location options only).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "storage/open_store.h"

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s);

// Parses -o lists that may only name where and how a store is reached (endpoint, region,
// profile, addressing, ca_file, remote_requests). Throws config::ConfigError.
config::Settings parse_store_location_options(const std::vector<std::string>& lists);

}  // namespace fid::cli
