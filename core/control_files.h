// The files /.fidelity/stats, config and metrics as immutable snapshots: each lookup of a name
// makes a snapshot of the current content with an inode of its own, which the kernel may cache
// like any other file. While the content does not change, lookups return the same snapshot, so
// tools which stat a path and then open it (cp, rsync) see one file.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "core/inodes.h"

namespace fid::core {

class Telemetry;

class ControlFiles {
 public:
  using Text = std::shared_ptr<const std::string>;
  // `telemetry` renders the current text of a snapshot type (kSnapshotTypes).
  ControlFiles(const InodeMap& inodes, const Telemetry& telemetry);

  // The inode of a snapshot of t's current content (a new one if it changed).
  uint64_t snapshot_inode(NodeType t);
  // The content of snapshot node n; rendered afresh if it has left the window of kept ones.
  Text content(const Node& n) const;

 private:
  static constexpr size_t kKept = 256;  // snapshots kept for readers that looked one up
  const InodeMap& inodes_;
  const Telemetry& telemetry_;
  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, Text>> kept_;  // (generation, content), oldest first
  uint64_t next_generation_ = 0;
  std::pair<uint64_t, Text> latest_[std::size(kSnapshotTypes)];  // by snapshot_index
};

}  // namespace fid::core
