// See gpu_model_device.h. The data moves at once (in stream order, which is the order calls
// come in on a stream); only the time is modelled.
#include "cuda/gpu_model_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "codec/l3_block_plan.h"

namespace fid::gpu {

ModelDevice::ModelDevice(const DeviceModel& model) : model_(model) {}
ModelDevice::~ModelDevice() = default;

fid::Result<uint8_t*> ModelDevice::alloc_host(size_t bytes) {
  auto* p = new (std::nothrow) uint8_t[std::max<size_t>(bytes, 1)];
  if (!p) return fid::Error{ENOMEM, "model device: pinned allocation: out of memory"};
  std::lock_guard lock(mu_);
  ++counts_.host_allocations;
  return p;
}
void ModelDevice::free_host(uint8_t* p) { delete[] p; }

fid::Result<uint8_t*> ModelDevice::alloc_device(size_t bytes) {
  auto* p = new (std::nothrow) uint8_t[std::max<size_t>(bytes, 1)];
  if (!p) return fid::Error{ENOMEM, "model device: device allocation: out of memory"};
  std::lock_guard lock(mu_);
  ++counts_.device_allocations;
  return p;
}
void ModelDevice::free_device(uint8_t* p) { delete[] p; }

fid::Result<unsigned> ModelDevice::create_stream() {
  std::lock_guard lock(mu_);
  stream_done_.push_back(Clock::time_point{});
  last_kernel_ms_.push_back(0);
  return static_cast<unsigned>(stream_done_.size() - 1);
}

ModelDevice::Clock::duration ModelDevice::copy_time(size_t bytes) const {
  if (model_.copy_gb_per_s <= 0) return {};
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(bytes) / (model_.copy_gb_per_s * 1e9)));
}

ModelDevice::Clock::time_point ModelDevice::schedule(unsigned stream, Clock::time_point& engine_free,
                                                     Clock::duration took) {
  const Clock::time_point now = Clock::now();
  const Clock::time_point start = std::max({now, stream_done_.at(stream), engine_free});
  engine_free = start + took;
  stream_done_[stream] = start + took;
  const auto busy = std::count_if(stream_done_.begin(), stream_done_.end(), [&](auto t) { return t > now; });
  counts_.peak_streams_busy = std::max(counts_.peak_streams_busy, static_cast<unsigned>(busy));
  return start;
}

fid::Status ModelDevice::upload(unsigned stream, uint8_t* dev, const uint8_t* host, size_t bytes) {
  std::memcpy(dev, host, bytes);
  std::lock_guard lock(mu_);
  schedule(stream, upload_free_, copy_time(bytes));
  return {};
}

fid::Status ModelDevice::zero(unsigned stream, uint8_t* dev, size_t bytes) {
  std::memset(dev, 0, bytes);
  std::lock_guard lock(mu_);
  schedule(stream, compute_free_, {});
  return {};
}

fid::Status ModelDevice::launch(unsigned stream, const KernelArgs& k) {
  if (model_.run_kernel)
    codec::l3_run_tasks_emulated(reinterpret_cast<const l3k::PatchTask*>(k.tasks), k.blocks, k.data,
                                 reinterpret_cast<const l3k::HuffTable*>(k.tables), k.out, k.status, 256, false);
  const size_t waves = (k.blocks + model_.blocks_per_wave - 1) / std::max<size_t>(model_.blocks_per_wave, 1);
  const auto took = std::chrono::duration_cast<Clock::duration>(model_.wave * static_cast<int64_t>(waves));
  std::lock_guard lock(mu_);
  schedule(stream, compute_free_, took);
  ++counts_.launches;
  last_kernel_ms_.at(stream) = std::chrono::duration<double, std::milli>(took).count();
  return {};
}

fid::Status ModelDevice::download(unsigned stream, uint8_t* host, const uint8_t* dev, size_t bytes) {
  std::memcpy(host, dev, bytes);
  std::lock_guard lock(mu_);
  schedule(stream, download_free_, copy_time(bytes));
  return {};
}

fid::Result<double> ModelDevice::finish(unsigned stream) {
  Clock::time_point done;
  double ms = 0;
  {
    std::lock_guard lock(mu_);
    done = stream_done_.at(stream);
    ms = last_kernel_ms_.at(stream);
  }
  std::this_thread::sleep_until(done);
  return ms;
}

DeviceModelCounts ModelDevice::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace fid::gpu
