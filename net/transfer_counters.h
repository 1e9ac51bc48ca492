// What an HttpClient has fetched: requests, retries, bytes. A record source keeps one
// (storage::SourceCounters) for /.fidelity/stats and hands it to its client.
#pragma once

#include <atomic>
#include <cstdint>

namespace fid::net {

struct TransferCounters {
  std::atomic<uint64_t> requests{0};  // reads issued to storage (a retry counts again)
  std::atomic<uint64_t> retries{0};   // of those, repeats of a failed read (remote sources)
  std::atomic<uint64_t> bytes{0};     // bytes read from storage (after any alignment)
};

}  // namespace fid::net
