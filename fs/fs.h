// The FUSE low-level filesystem over a loaded store. See docs/MOUNT.md for the user-facing
// behaviour (levels, xattrs, /.fidelity) and DESIGN.md for the contracts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec/l3_batch.h"
#include "config/config.h"
#include "index/store.h"

namespace fid::fs {

// Level from the config rules for every file (first matching rule wins; 0 = no rule). Levels
// are resolved against the store (full -> L).
std::vector<uint8_t> rule_levels(const index::Store& store, const std::vector<config::Rule>& rules);

struct ServeRequest {
  std::string mountpoint;
  bool debug = false;  // FUSE request tracing on stderr
  codec::L3BatchDecoder* l3_decoder = nullptr;  // the GPU decoder (gpu=on/auto with a device), else CPU
};

// Mounts `store` at req.mountpoint and serves until it is unmounted or the process receives
// SIGTERM/SIGINT/SIGHUP (then unmounts cleanly). `ready` is called exactly once, from another
// thread: with "" as soon as the mount answers a stat of its root, or with an error message if
// mounting fails. Returns 0 after a clean unmount, 1 on failure.
int serve(const index::Store& store, const config::Settings& settings, const ServeRequest& req,
          const std::function<void(const std::string& error)>& ready);

}  // namespace fid::fs
