// A local disk cache of record prefixes in front of a (remote) RecordSource: bounded in bytes
// with least-recently-used eviction, keyed by store identity and record (records never change),
// kept across remounts, safe when several mounts of one store share the folder, and never
// serving a partial file after a crash. docs/MOUNT.md describes the folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "index/store.h"
#include "storage/record_source.h"

namespace fid::storage {

class DiskCache;  // see disk_cache.cpp

// Wraps `inner`: prefix reads are served from DIR when a long enough copy is there, else read
// from `inner` (only the bytes the cached copy lacks) and stored; range reads are served from
// a cached prefix that covers them, else passed to `inner` (not stored). `identity` names the
// store (a hash of its index), so two stores never share entries.
std::unique_ptr<RecordSource> make_disk_cached_source(const index::Store& store, std::unique_ptr<RecordSource> inner,
                                                      const std::filesystem::path& dir, uint64_t max_bytes,
                                                      const std::string& identity);

}  // namespace fid::storage
