// What the mount tells about itself: /.fidelity/stats (JSON), /.fidelity/metrics (Prometheus
// text) and /.fidelity/config. Every counter and gauge is a Reading (common/readings.h) declared
// once by the part that counts it; both formats are rendered from that one list. The counts of
// the operations themselves (lookups, reads by kind and level, their latency) live here.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/readings.h"
#include "config/config.h"
#include "core/change_access.h"
#include "core/clip_pushes.h"
#include "core/folder_listings.h"
#include "core/file_reader.h"
#include "core/inodes.h"
#include "core/level_changes.h"
#include "core/level_policy.h"
#include "core/metrics.h"
#include "core/orders.h"
#include "core/random_reads.h"
#include "core/request_errors.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

class Telemetry {
 public:
  // The parts whose readings are rendered. They are read only when a file is rendered, so they
  // may be built after the Telemetry (the mount builds it before the control files that show it).
  struct Parts {
    const index::Store& store;
    const storage::RecordSource& source;
    const config::Settings& settings;
    const FileReader& reader;
    const LevelPolicy& levels;
    const LevelChanges& changes;
    const ChangeAccess& change_access;
    const OrderFiles& orders;
    const RandomReads& random_reads;
    const RequestErrors& request_errors;
    const ClipPushes& pushes;
    const FolderListings& listings;
    std::string mountpoint;
  };
  explicit Telemetry(Parts parts);

  // A lookup in the tree (not in /.fidelity, whose own stats would change at every lookup).
  void count_lookup() { lookups_.fetch_add(1, std::memory_order_relaxed); }
  // A read of a control or order file that returned `bytes`.
  void count_control_read(uint64_t bytes);
  // A read of a tree file of `kind` at `level` that returned `bytes` (0: it failed) in `took`.
  void count_read(index::FileKind kind, int level, uint64_t bytes, std::chrono::nanoseconds took);

  // The current content of a snapshot type: stats, metrics or config.
  std::string render(NodeType t) const;
  // How requests reach the daemon ("uring (2 queues, 16 entries)", "dev"), once the kernel's INIT
  // has settled it.
  void set_transport(std::string what);

 private:
  Readings readings() const;
  // Reads and bytes per kind of file and JPEG level.
  void add_read_readings(Readings& r) const;
  std::string stats_json() const;
  std::string metrics_text() const;
  std::string config_json() const;
  // Slot of a read in read_counts_: a JPEG at level k in slot k (1..L), an l3 file in slot L + 1,
  // a blob in slot L + 2.
  size_t read_slot(index::FileKind kind, int level) const;

  const Parts p_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<uint64_t> lookups_{0}, reads_{0}, bytes_{0};
  struct ReadCount {
    std::atomic<uint64_t> reads{0}, bytes{0};
  };
  std::unique_ptr<ReadCount[]> read_counts_;
  LatencyHistogram read_latency_;  // reads of tree files, from the request to its bytes
  mutable std::mutex transport_mu_;
  std::string transport_ = "dev";
};

// What /.fidelity/config shows besides the settings: the store, the mount and what it decided.
struct MountFacts {
  std::string store, mountpoint;
  int levels = 0, effective_default_level = 0;
  std::string gpu_decoder, source, level_changers;
  std::string transport = "dev";  // the transport in use
};
// /.fidelity/config's text: every row of the settings' table (config/settings_table.h) under its
// name with the value `s` holds, the other settings and `facts` around them.
std::string config_json(const config::Settings& s, const MountFacts& facts);

}  // namespace fid::core
