// A modelled GPU: host memory stands in for pinned and device memory, the block kernel's
// per-pixel code runs on the CPU (codec/l3_block_plan.h), and each stream's work is timed as a
// GPU would time it: one copy engine each way at a set rate, kernels that take one `wave` per
// `blocks_per_wave` thread blocks, and finish() sleeping until the stream's work would be done.
// With zero times it is the mount's gpu=emulate; with times, the unit tests' model of a device.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/gpu_device.h"

namespace fid::gpu {

struct DeviceModel {
  double copy_gb_per_s = 0;               // 0: copies take no time
  std::chrono::microseconds wave{0};      // a kernel's time per wave of thread blocks
  size_t blocks_per_wave = 132 * 8;       // an H100/H200: 132 SMs, 8 blocks of 256 threads each
  bool run_kernel = true;                 // false: time only (the pixels are not written)
};

// What the model counts, for tests.
struct DeviceModelCounts {
  uint64_t host_allocations = 0, device_allocations = 0, launches = 0;
  unsigned peak_streams_busy = 0;  // the most streams with work not yet finished, at once
};

class ModelDevice final : public Device {
 public:
  explicit ModelDevice(const DeviceModel& model);
  ~ModelDevice() override;
  std::string name() const override { return "CPU emulation of the CUDA block decoder"; }
  fid::Result<uint8_t*> alloc_host(size_t bytes) override;
  void free_host(uint8_t* p) override;
  fid::Result<uint8_t*> alloc_device(size_t bytes) override;
  void free_device(uint8_t* p) override;
  fid::Result<unsigned> create_stream() override;
  fid::Status upload(unsigned stream, uint8_t* dev, const uint8_t* host, size_t bytes) override;
  fid::Status zero(unsigned stream, uint8_t* dev, size_t bytes) override;
  fid::Status launch(unsigned stream, const KernelArgs& kernel) override;
  fid::Status download(unsigned stream, uint8_t* host, const uint8_t* dev, size_t bytes) override;
  fid::Result<double> finish(unsigned stream) override;

  DeviceModelCounts counts() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Puts `took` of work on `stream` behind the engine it needs; returns its start.
  Clock::time_point schedule(unsigned stream, Clock::time_point& engine_free, Clock::duration took);
  Clock::duration copy_time(size_t bytes) const;

  const DeviceModel model_;
  mutable std::mutex mu_;
  std::vector<Clock::time_point> stream_done_;
  std::vector<double> last_kernel_ms_;
  Clock::time_point upload_free_{}, download_free_{}, compute_free_{};
  DeviceModelCounts counts_;
};

}  // namespace fid::gpu
