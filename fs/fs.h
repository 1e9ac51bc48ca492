// The libfuse adapter: mounts a core::Filesystem and answers the kernel's requests with it.
// Each handler decodes its request, calls the core and replies; this is the one place where an
// Error becomes an errno reply. docs/MOUNT.md states the behaviour users see; docs/DESIGN.md
// shows the layers.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>

#include "codec/l3_batch.h"
#include "common/error.h"
#include "codec/video_stream.h"
#include "config/config.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::fs {

struct ServeRequest {
  std::string mountpoint;
  bool debug = false;                           // FUSE request tracing on stderr
  codec::L3BatchDecoder* l3_decoder = nullptr;  // the GPU decoder (gpu=on/auto with a device), else CPU
  codec::GopDecoder* video_decoder = nullptr;   // the decoder of video streams' GOPs, where the store has them
  std::optional<gid_t> level_change_group;      // the gid of level_changes=group=NAME
};

// Mounts `store`, whose records `source` reads, at req.mountpoint and serves until it is
// unmounted or the process receives SIGTERM/SIGINT/SIGHUP (then unmounts cleanly). `ready` is
// called exactly once, from another thread: with "" as soon as the mount answers a stat of its
// root, or with an error message if mounting fails. Ok after a clean unmount (a signal's too),
// else the error (which `ready` has already been given when mounting failed).
Status serve(const index::Store& store, storage::RecordSource& source, const config::Settings& settings,
          const ServeRequest& req, const std::function<void(const std::string& error)>& ready);

}  // namespace fid::fs
