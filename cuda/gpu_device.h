// What the GPU L3 decoder (cuda/gpu_decoder.h) asks of a device: memory, in-order streams of
// copies and kernels, and a blocking wait. Two devices: CUDA (cuda/gpu_l3.cu) and a model
// (cuda/gpu_model_device.h) that times copies and kernels as a GPU would and runs the kernel's
// per-pixel code on the CPU, so the decoder's host code is the same one with or without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"

namespace fid::gpu {

// One launch of the block kernel (codec/l3_block.h) over a staged batch (codec::L3BatchLayout):
// device pointers, one thread block per task.
struct KernelArgs {
  const uint8_t* tasks = nullptr;
  size_t blocks = 0;
  const uint8_t* data = nullptr;
  const uint8_t* tables = nullptr;
  uint8_t* out = nullptr;
  int* status = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;

  // Pinned host memory (a copy from or to it is a DMA) and device memory. Errors name the call.
  virtual fid::Result<uint8_t*> alloc_host(size_t bytes) = 0;
  virtual void free_host(uint8_t* p) = 0;
  virtual fid::Result<uint8_t*> alloc_device(size_t bytes) = 0;
  virtual void free_device(uint8_t* p) = 0;

  // A new stream, by number. Work on one stream runs in order; streams run at once.
  virtual fid::Result<unsigned> create_stream() = 0;
  virtual fid::Status upload(unsigned stream, uint8_t* dev, const uint8_t* host, size_t bytes) = 0;
  virtual fid::Status zero(unsigned stream, uint8_t* dev, size_t bytes) = 0;
  virtual fid::Status launch(unsigned stream, const KernelArgs& kernel) = 0;
  virtual fid::Status download(unsigned stream, uint8_t* host, const uint8_t* dev, size_t bytes) = 0;
  // Blocks (without spinning) until the stream's work is done; the last launch's kernel time (ms).
  virtual fid::Result<double> finish(unsigned stream) = 0;
};

}  // namespace fid::gpu
