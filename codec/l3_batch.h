// The contract between the mount and a batch L3 decoder (the CUDA one in cuda/): many
// bitstreams decoded in one call, into host buffers the decoder hands out (pinned memory for a
// GPU, so that its device-to-host copies land where the FUSE reply is sent from).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/l3_block_plan.h"
#include "common/error.h"

namespace fid::codec {

// Host memory owned by whoever allocated it; `release` gives it back (to a pinned pool, or to
// the heap).
class HostBuffer {
 public:
  HostBuffer(uint8_t* data, size_t size, std::function<void(uint8_t*, size_t)> release)
      : data_(data), size_(size), release_(std::move(release)) {}
  ~HostBuffer() {
    if (release_) release_(data_, size_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<uint8_t> span() const { return {data_, size_}; }

  // A heap buffer (no pool).
  static std::shared_ptr<HostBuffer> heap(size_t size) {
    return std::make_shared<HostBuffer>(new uint8_t[size], size, [](uint8_t* p, size_t) { delete[] p; });
  }

 private:
  uint8_t* data_;
  size_t size_;
  std::function<void(uint8_t*, size_t)> release_;
};

// One image of a batch: the L3 bitstream in, its pixels (interleaved, rows without padding,
// exactly width*height*channels bytes) out.
struct L3Job {
  std::span<const uint8_t> l3;
  std::span<uint8_t> pixels;
  bool ok = false;
  std::string error;  // why, when !ok
};

// What a batch decoder counts about its own memory and device (the mount's stats "gpu").
struct L3DecoderStats {
  uint64_t pageable_views = 0;     // views given heap memory: the pinned views were all in use
  uint64_t buffer_growths = 0;     // batch buffers grown past their size at start (a job over the batch cap)
  uint64_t host_allocations = 0;   // pinned allocations made, at start included
  uint64_t device_allocations = 0; // device allocations made, at start included
  unsigned peak_in_flight = 0;     // the most batches on the device at once
  double kernel_seconds = 0;       // kernel time of every batch so far
};

class L3BatchDecoder {
 public:
  virtual ~L3BatchDecoder() = default;
  // One line for logs and --version, e.g. "CUDA device 0: NVIDIA H100 80GB HBM3".
  virtual std::string description() const = 0;
  // A buffer for a decoded view. Never null: over the decoder's memory cap it is heap memory.
  virtual std::shared_ptr<HostBuffer> allocate(size_t bytes) = 0;
  // Decodes every job and sets its ok/error (a job's own failure, e.g. a corrupt bitstream).
  // An Error is the decoder's own failure (EIO: a CUDA error; ENOMEM): the jobs' ok/error and
  // pixels are then unspecified and the caller decodes them another way (core::L3Batcher: on
  // the CPU). Thread-safe; up to concurrency() calls overlap (one per stream), so a batcher
  // can fill one while another is on the device.
  virtual fid::Status decode(std::span<L3Job* const> jobs) = 0;
  virtual unsigned concurrency() const = 0;
  // The most bitstream + pixel bytes one decode() call should get (0: no limit); it bounds
  // the decoder's working buffers. A job larger than this alone still goes, in a batch of one.
  virtual size_t max_batch_bytes() const { return 0; }
  virtual L3DecoderStats stats() const { return {}; }
};

// ---- batches for the block decoder (codec/l3_block.h), shared by the GPU and its emulation ----

// One batch laid out for a block decoder. The input is staged as one buffer:
// [tasks | Huffman tables | bitstreams], so a device needs one upload; image i of the plan is
// job blocked[i], its bitstream at data_at + in_base[i], its pixels at out_base[i] of the output.
struct L3BatchLayout {
  L3BatchPlan plan;
  std::vector<L3Job*> blocked;
  std::vector<uint64_t> in_base, out_base;
  uint64_t in_bytes = 0, out_bytes = 0;
  size_t tables_at = 0, data_at = 0, staged_bytes = 0;

  // Writes the staged input (staged_bytes) to `dst`.
  void stage(uint8_t* dst) const;
};

// Decodes one job on the CPU (l3_decode_into) and sets its ok/error.
void l3_decode_job_on_cpu(L3Job& job);

// Plans every job of a batch. Jobs the block decoder cannot take (INTER_PATCH, a bad header, a
// wrong output size) are finished here, on the CPU, and are not in the layout.
void l3_layout_batch(std::span<L3Job* const> jobs, L3BatchLayout& layout);

// Sets ok/error of the blocked jobs from the block decoder's status words (one per image); a
// failed image is decoded again on the CPU, for its precise reason.
void l3_finish_batch(const L3BatchLayout& layout, const int* status);

}  // namespace fid::codec
