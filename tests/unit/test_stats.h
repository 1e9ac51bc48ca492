// A counter of a mount's /.fidelity/stats, read through the core as a reader would read the file.
#pragma once

#include <cstdint>
#include <string>

#include "core/filesystem.h"

namespace fid::testutil {

// The value of `key` (its last dotted part, as it appears in the JSON), or UINT64_MAX if absent.
inline uint64_t stats_value(core::Filesystem& fs, const std::string& key) {
  auto text = fs.read(fs.lookup(fs.lookup(1, ".fidelity")->ino, "stats")->ino, 0, 1 << 20);
  const std::string json(reinterpret_cast<const char*>(text->data.data()), text->data.size());
  const size_t at = json.find("\"" + key + "\":");
  return at == std::string::npos ? UINT64_MAX : std::stoull(json.substr(at + key.size() + 3));
}

}  // namespace fid::testutil
