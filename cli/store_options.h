// How the commands that read a store (mount, inspect, verify, quality) turn settings into
// storage::StoreOptions, and the -o list of inspect, verify and quality (store-location options
// only).
#pragma once

#include <atomic>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "config/config.h"
#include "index/store.h"
#include "net/url.h"
#include "storage/open_store.h"

namespace fid::cli {

storage::StoreOptions store_options(const config::Settings& s);

// Parses -o lists that may only name where and how a store is reached (the settings of
// Reach::store in config/settings_table.cpp). EINVAL naming the first bad option.
Result<config::Settings> parse_store_location_options(const std::vector<std::string>& lists);

// The preamble of inspect, verify and quality: parses their -o lists and opens STORE with them.
// On failure it prints "fidelityfs COMMAND: message" and returns nullopt with `exit_code` set:
// usage for a bad -o list, runtime for a store that does not open. direct_io, cancel:
// StoreOptions's (a command that stops when interrupted passes its flag).
std::optional<storage::OpenedStore> open_command_store(std::string_view command, const std::string& location,
                                                       const std::vector<std::string>& options, int& exit_code,
                                                       bool direct_io = true, const std::atomic<bool>* cancel = nullptr);

// What interrupted or refused `pack --append`s left in the store at `location` (opened as
// `store`, with the -o lists `options`): pack::append_leftovers in a folder,
// pack::s3_append_leftovers on s3:// (nothing when the bucket cannot be listed), nothing over
// http(s)://. print_append_leftovers says each on a line of its own.
std::vector<std::string> append_leftovers(const std::string& location, const std::vector<std::string>& options,
                                          const index::Store& store);
void print_append_leftovers(const std::vector<std::string>& leftovers);

}  // namespace fid::cli
