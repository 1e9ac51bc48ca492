// The optional CUDA path: what the build has and what the machine has, and the GPU L3 batch
// decoder. Plain C++ (no CUDA types), so the rest of the project builds the same with or
// without nvcc; without it, probe() says so and make_gpu_decoder() fails.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "codec/l3_batch.h"
#include "common/error.h"

namespace fid::gpu {

struct Probe {
  bool built = false;      // compiled with CUDA
  std::string toolkit;     // CUDA runtime version built against, e.g. "13.0"
  int devices = 0;         // usable CUDA devices
  std::string device;      // name of device 0
  std::string why_none;    // when devices == 0: the runtime's reason
};
// Safe to call before fork() only if the process will not use CUDA in the child: it initialises
// the driver. The mount probes in its daemon, after fork.
Probe probe();

// One line for --version: "CUDA 13.0 built in; device: NVIDIA H100" / "...; no device (why)" /
// "CUDA not built in".
std::string describe(const Probe& p);

struct DecoderOptions {
  size_t memory_bytes = size_t{1} << 30;  // all the decoder holds, pinned host and device (gpu_memory)
  unsigned streams = 2;                   // batches in flight at once
};

// How a decoder divides memory_bytes: half is pinned host memory for views (beyond it views use
// heap memory), half the streams' batch buffers. A stream holds its batch's input twice (pinned
// staging, device copy) and its pixels once (device), at most twice the batch's bitstream +
// pixel bytes, so a batch is capped at a quarter of the memory over the number of streams.
struct MemorySplit {
  size_t view_bytes;   // pinned views, all together
  size_t batch_bytes;  // bitstream + pixel bytes of one batch (L3BatchDecoder::max_batch_bytes)
};
MemorySplit split_memory(const DecoderOptions& options);

// The GPU L3 decoder on device 0. Fails with ENOTSUP when this build has no CUDA decoder,
// ENODEV when the machine has no usable device, EIO when the CUDA runtime fails to set it up
// (the message names the call and the runtime's reason). Its host side is cuda/gpu_decoder.h. Images the block decoder cannot take
// (INTER_PATCH) are decoded on the CPU inside decode(); a CUDA error there is decode()'s EIO.
fid::Result<std::unique_ptr<codec::L3BatchDecoder>> make_gpu_decoder(const DecoderOptions& options);

// The same decoder on a modelled device that runs the kernel's code on the CPU (the mount's
// gpu=emulate): the GPU path's host code, batches and view memory, tested without a GPU.
fid::Result<std::unique_ptr<codec::L3BatchDecoder>> make_emulated_decoder(const DecoderOptions& options);

}  // namespace fid::gpu
