// random_reads=auto|records|pieces: how a read of a file whose record prefix is not cached is
// served. `records` loads the record's prefix (one storage read; other readers of the record
// wait for it) and serves the file, and the record's later files, from it: a random epoch then
// reads each record once, as a published order does. That pays only while the prefixes stay
// cached until the record's other files are read, so `auto` picks records when the cache that
// keeps them holds every prefix the mount reads at its files' current levels (of the ranks'
// share once rank orders are read): the memory cache (`cache`), or for a remote store with a
// disk cache, the disk cache (`disk_cache_size`). Otherwise a read fetches the file's own pieces.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/file_reader.h"
#include "core/level_policy.h"
#include "index/order.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

// Which records a mount's readers read: all, or those dealt to the ranks whose orders it served.
struct ReadShare {
  std::vector<bool> records;  // by record id; empty: every record
  std::string what = "every record";
};

// Bytes of the record prefixes that reading the share at the files' current levels keeps
// cached: each record's prefix at the highest level any of its files reads at, in the memory
// cache's allocation unit (4 KiB pages). `gather`: file records may be read as gathered
// prefixes (record_prefix_level).
uint64_t prefix_bytes_needed(const index::Store& store, const LevelPolicy& policy, const ReadShare& share,
                             bool gather = true);

struct RandomReadsDecision {
  config::RandomReads setting = config::RandomReads::auto_;
  bool records = false;           // the mode in force
  bool memory_holds_all = false;  // the memory cache holds every prefix needed
  uint64_t needed = 0;            // prefix_bytes_needed
  uint64_t budget = 0;            // the bytes of the cache that decides
  std::string budget_name;        // "cache" or "disk_cache_size"
  std::string share;              // ReadShare::what
  // "records (auto: the prefixes of every record need 52428800 B, cache holds 268435456 B)"
  std::string text() const;
};

// disk_cache_bytes: the disk cache's bound when the store is remote and has one.
RandomReadsDecision decide_random_reads(config::RandomReads setting, uint64_t needed, uint64_t cache_bytes,
                                        std::optional<uint64_t> disk_cache_bytes, std::string share);

// A mount's random_reads mode, in force in its FileReader: decided at the start and anew when
// what it depends on changes (a level, the ranks whose orders readers took, the order seed);
// logged when the decision changes.
class RandomReads {
 public:
  RandomReads(const index::Store& store, const storage::RecordSource& source, const config::Settings& settings,
              const LevelPolicy& levels, FileReader& reader);
  // A level changed: the prefixes needed did.
  void decide();
  // A reader took rank order.rank of a world > 1: the mount's share adds that rank's records.
  void note_rank_order(const index::OrderParams& order);
  // The order seed changed: the ranks' records did, so the share counts again from the next rank order.
  void forget_share();
  RandomReadsDecision decision() const;

 private:
  void decide_locked();

  const index::Store& store_;
  const storage::RecordSource& source_;
  const config::RandomReads setting_;
  const uint64_t cache_bytes_;
  const LevelPolicy& levels_;
  FileReader& reader_;
  mutable std::mutex mu_;
  // The ranks of one world size whose orders readers took, and their share of the records.
  uint32_t share_world_ = 1;
  uint64_t share_epoch_ = 0;
  std::vector<uint32_t> share_ranks_;
  ReadShare share_;
  RandomReadsDecision decision_;
};

}  // namespace fid::core
