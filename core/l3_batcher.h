// Batches concurrent L3 decodes for a batch decoder (the GPU): FUSE threads that miss the view
// cache queue their bitstream and wait. When no batch is on the decoder, what is queued goes at
// once; while one is, the next batch goes when it holds max_batch jobs, or the decoder's
// max_batch_bytes() of bitstreams and pixels, or when its oldest job has waited `deadline`.
// One worker per decoder stream, so one batch fills while another is on the device. If the decoder itself fails (its decode() returns
// an Error, e.g. a CUDA error), that batch is decoded on the CPU instead: readers get their
// pixels, never an error for a device problem.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codec/l3_batch.h"
#include "common/error.h"

namespace fid::core {

class L3Batcher {
 public:
  struct Options {
    unsigned max_batch = 64;
    std::chrono::microseconds deadline{1000};
  };
  struct Stats {
    uint64_t jobs = 0;
    uint64_t batches = 0;
    uint64_t full_batches = 0;  // sent because a full batch (jobs or bytes) was waiting; the rest: the deadline or an idle decoder
    uint64_t failed_jobs = 0;     // bitstreams that do not decode (corrupt data)
    uint64_t cpu_fallbacks = 0;   // batches decoded on the CPU because the decoder failed
  };

  // `on_decoder_error` is told why, each time the decoder fails (from a worker thread).
  L3Batcher(codec::L3BatchDecoder& decoder, Options options,
            std::function<void(const std::string&)> on_decoder_error = {});
  ~L3Batcher();  // decodes what is queued, then stops the workers
  L3Batcher(const L3Batcher&) = delete;
  L3Batcher& operator=(const L3Batcher&) = delete;

  // Decodes one bitstream into `pixels` together with whatever else is queued; blocks until done.
  Status decode(std::span<const uint8_t> l3, std::span<uint8_t> pixels);

  Stats stats() const;

 private:
  struct Pending {
    codec::L3Job job;
    std::chrono::steady_clock::time_point queued;
    bool done = false;
  };
  void work();
  // How many jobs at the front of the queue make the next batch, and whether that batch is full
  // (max_batch jobs, or the next job would not fit in max_batch_bytes).
  std::pair<size_t, bool> next_batch() const;

  codec::L3BatchDecoder& decoder_;
  const Options options_;
  const size_t max_batch_bytes_;  // the decoder's (SIZE_MAX where it has no limit)
  const std::function<void(const std::string&)> on_decoder_error_;
  mutable std::mutex mu_;
  std::condition_variable queued_cv_;  // workers: a job arrived, or stop
  std::condition_variable done_cv_;    // callers: a batch finished
  std::deque<Pending*> queue_;
  bool stop_ = false;
  unsigned in_flight_ = 0;  // batches on the decoder
  Stats stats_;
  std::vector<std::thread> workers_;
};

}  // namespace fid::core
