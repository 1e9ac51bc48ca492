// The CUDA L3 batch decoder: one thread block per patch (codec/l3_block.h, the same code the
// CPU emulation test runs), pinned host buffers for input and views, one stream per slot.
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "codec/l3_batch.h"
#include "codec/l3_block.h"
#include "common/error.h"
#include "cuda/gpu.h"

namespace fid::gpu {
namespace {

constexpr unsigned kBlockThreads = 256;

struct DeviceBlock {
  template <class F>
  __device__ void single(F&& f) {
    if (threadIdx.x == 0) f();
    __syncthreads();
  }
  template <class F>
  __device__ void all(F&& f) {
    f(threadIdx.x, blockDim.x);
    __syncthreads();
  }
};

__global__ void __launch_bounds__(kBlockThreads)
    decode_patches(const l3k::PatchTask* tasks, const uint8_t* in, const l3k::HuffTable* tables, uint8_t* out,
                   int* status) {
  __shared__ l3k::PatchShared shared;
  DeviceBlock block;
  l3k::decode_patch_block(block, shared, tasks[blockIdx.x], in, tables, out, status);
}

// A CUDA runtime call's result: EIO naming the call (`what`) and the runtime's reason.
fid::Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return fid::Error{EIO, std::string("CUDA ") + what + ": " + cudaGetErrorString(e)};
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Pinned host memory for views, reused by size class (at most 1/8 above the request), with a cap
// on the total; over the cap a view gets heap memory, which still works, only with a staged copy.
class PinnedPool {
 public:
  explicit PinnedPool(size_t cap) : cap_(cap) {}
  ~PinnedPool() {
    for (auto& [cls, list] : free_)
      for (uint8_t* p : list) cudaFreeHost(p);
  }

  uint8_t* take(size_t cls) {
    std::lock_guard lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      uint8_t* p = it->second.back();
      it->second.pop_back();
      return p;
    }
    // Give back idle buffers of other sizes until the new one fits under the cap.
    for (auto f = free_.begin(); total_ + cls > cap_ && f != free_.end(); ++f) {
      while (total_ + cls > cap_ && !f->second.empty()) {
        cudaFreeHost(f->second.back());
        f->second.pop_back();
        total_ -= f->first;
      }
    }
    if (total_ + cls > cap_) return nullptr;
    void* p = nullptr;
    if (cudaHostAlloc(&p, cls, cudaHostAllocPortable) != cudaSuccess) return nullptr;
    total_ += cls;
    return static_cast<uint8_t*>(p);
  }
  void give(uint8_t* p, size_t cls) {
    std::lock_guard lock(mu_);
    free_[cls].push_back(p);
  }

  static size_t size_class(size_t n) {
    size_t step = 4096;
    while (step * 8 < n) step <<= 1;
    return align_up(std::max<size_t>(n, 1), step);
  }

 private:
  const size_t cap_;
  std::mutex mu_;
  size_t total_ = 0;
  std::map<size_t, std::vector<uint8_t*>> free_;
};

// A buffer that grows to the largest batch seen (in MiB steps) and is never shrunk: batches are
// capped by bytes (max_batch_bytes), so this stays within the decoder's memory split.
template <class Alloc, class Free>
fid::Status reserve(uint8_t*& p, size_t& cap, size_t need, Alloc alloc, Free release, const char* what) {
  if (need <= cap) return {};
  constexpr size_t kStep = size_t{1} << 20;
  const size_t n = (need + kStep - 1) / kStep * kStep;
  if (p) release(p);
  p = nullptr;
  cap = 0;
  void* q = nullptr;
  if (fid::Status allocated = check(alloc(&q, n), what); !allocated) return allocated;
  p = static_cast<uint8_t*>(q);
  cap = n;
  return {};
}

// One batch in flight: a stream, its events, a pinned staging area holding the batch's
// batch (codec::L3BatchLayout) and a device copy of it, the device output and status words.
struct Slot {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  uint8_t* host_in = nullptr;
  size_t host_in_cap = 0;
  uint8_t* dev_in = nullptr;
  size_t dev_in_cap = 0;
  uint8_t* dev_out = nullptr;
  size_t dev_out_cap = 0;
  uint8_t* host_status = nullptr;  // int per image, pinned
  size_t host_status_cap = 0;
  uint8_t* dev_status = nullptr;
  size_t dev_status_cap = 0;
  codec::L3BatchLayout layout;

  Slot() = default;
  // The stream and its events; the destructor frees what was created.
  fid::Status init() {
    if (fid::Status st = check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"); !st) return st;
    if (fid::Status st = check(cudaEventCreate(&start), "event"); !st) return st;
    return check(cudaEventCreate(&stop), "event");
  }
  ~Slot() {
    if (host_in) cudaFreeHost(host_in);
    if (host_status) cudaFreeHost(host_status);
    if (dev_in) cudaFree(dev_in);
    if (dev_out) cudaFree(dev_out);
    if (dev_status) cudaFree(dev_status);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
};

auto pinned_alloc = [](void** p, size_t n) { return cudaHostAlloc(p, n, cudaHostAllocPortable); };
auto pinned_free = [](uint8_t* p) { cudaFreeHost(p); };
auto device_alloc = [](void** p, size_t n) { return cudaMalloc(p, n); };
auto device_free = [](uint8_t* p) { cudaFree(p); };

class GpuDecoder final : public codec::L3BatchDecoder {
 public:
  GpuDecoder(const DecoderOptions& o, std::string name)
      : split_(split_memory(o)), pool_(std::make_shared<PinnedPool>(split_.view_bytes)), name_(std::move(name)) {}

  // One slot per stream (at least one).
  fid::Status start(unsigned streams) {
    for (unsigned i = 0; i < std::max(1u, streams); ++i) {
      slots_.push_back(std::make_unique<Slot>());
      if (fid::Status st = slots_.back()->init(); !st) return st;
      idle_.push_back(slots_.back().get());
    }
    return {};
  }

  std::string description() const override { return name_; }
  unsigned concurrency() const override { return static_cast<unsigned>(slots_.size()); }
  size_t max_batch_bytes() const override { return split_.batch_bytes; }

  std::shared_ptr<codec::HostBuffer> allocate(size_t bytes) override {
    const size_t cls = PinnedPool::size_class(bytes);
    if (uint8_t* p = pool_->take(cls)) {
      std::shared_ptr<PinnedPool> pool = pool_;  // the pool outlives every buffer it lent
      return std::make_shared<codec::HostBuffer>(p, bytes, [pool, cls](uint8_t* q, size_t) { pool->give(q, cls); });
    }
    return codec::HostBuffer::heap(bytes);
  }

  // A CUDA error fails the whole batch (EIO); the caller decodes it elsewhere. Out of host
  // memory (the batch layout's vectors) is ENOMEM, the same way.
  fid::Status decode(std::span<codec::L3Job* const> jobs) override {
    Slot* s = acquire();
    fid::Status decoded = run_in_memory(*s, jobs);
    release(s);
    return decoded;
  }

  double kernel_seconds() const {
    std::lock_guard lock(mu_);
    return kernel_ms_ / 1000.0;
  }

 private:
  Slot* acquire() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return !idle_.empty(); });
    Slot* s = idle_.back();
    idle_.pop_back();
    return s;
  }
  void release(Slot* s) {
    {
      std::lock_guard lock(mu_);
      idle_.push_back(s);
    }
    idle_cv_.notify_one();
  }

  fid::Status run_in_memory(Slot& s, std::span<codec::L3Job* const> jobs) {
    try {
      return run(s, jobs);
    } catch (const std::bad_alloc&) {
      return fid::Error{ENOMEM, "GPU decoder: out of host memory for a batch"};
    }
  }

  fid::Status run(Slot& s, std::span<codec::L3Job* const> jobs) {
    codec::L3BatchLayout& b = s.layout;
    codec::l3_layout_batch(jobs, b);  // what the block decoder cannot take is done here on the CPU
    if (b.blocked.empty()) return {};
    if (fid::Status st = reserve_buffers(s, b); !st) return st;
    b.stage(s.host_in);
    if (fid::Status st = enqueue(s, b); !st) return st;
    if (fid::Status st = check(cudaStreamSynchronize(s.stream), "kernel"); !st) return st;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s.start, s.stop) == cudaSuccess) {
      std::lock_guard lock(mu_);
      kernel_ms_ += ms;
    }
    codec::l3_finish_batch(b, reinterpret_cast<const int*>(s.host_status));
    return {};
  }

  // The slot's buffers, grown to the batch.
  static fid::Status reserve_buffers(Slot& s, const codec::L3BatchLayout& b) {
    const size_t status_bytes = b.blocked.size() * sizeof(int);
    if (fid::Status st = reserve(s.host_in, s.host_in_cap, b.staged_bytes, pinned_alloc, pinned_free, "pinned input");
        !st)
      return st;
    if (fid::Status st = reserve(s.dev_in, s.dev_in_cap, b.staged_bytes, device_alloc, device_free, "device input");
        !st)
      return st;
    if (fid::Status st = reserve(s.dev_out, s.dev_out_cap, b.out_bytes, device_alloc, device_free, "device output");
        !st)
      return st;
    if (fid::Status st =
            reserve(s.host_status, s.host_status_cap, status_bytes, pinned_alloc, pinned_free, "pinned status");
        !st)
      return st;
    return reserve(s.dev_status, s.dev_status_cap, status_bytes, device_alloc, device_free, "device status");
  }

  // Upload, kernel, downloads and status on the slot's stream; a failed call stops the rest.
  static fid::Status enqueue(Slot& s, const codec::L3BatchLayout& b) {
    const size_t status_bytes = b.blocked.size() * sizeof(int);
    const cudaStream_t stream = s.stream;
    if (fid::Status st = check(cudaMemcpyAsync(s.dev_in, s.host_in, b.staged_bytes, cudaMemcpyHostToDevice, stream),
                               "upload");
        !st)
      return st;
    if (fid::Status st = check(cudaMemsetAsync(s.dev_status, 0, status_bytes, stream), "memset"); !st) return st;
    if (fid::Status st = check(cudaEventRecord(s.start, stream), "event"); !st) return st;
    const auto blocks = static_cast<unsigned>(b.plan.tasks.size());
    decode_patches<<<blocks, kBlockThreads, 0, stream>>>(
        reinterpret_cast<const l3k::PatchTask*>(s.dev_in), s.dev_in + b.data_at,
        reinterpret_cast<const l3k::HuffTable*>(s.dev_in + b.tables_at), s.dev_out,
        reinterpret_cast<int*>(s.dev_status));
    if (fid::Status st = check(cudaGetLastError(), "kernel launch"); !st) return st;
    if (fid::Status st = check(cudaEventRecord(s.stop, stream), "event"); !st) return st;
    // Pixels go straight into the callers' buffers (pinned views: a DMA, no extra pass).
    for (size_t i = 0; i < b.blocked.size(); ++i) {
      const std::span<uint8_t> px = b.blocked[i]->pixels;
      if (fid::Status st = check(
              cudaMemcpyAsync(px.data(), s.dev_out + b.out_base[i], px.size(), cudaMemcpyDeviceToHost, stream),
              "download");
          !st)
        return st;
    }
    return check(cudaMemcpyAsync(s.host_status, s.dev_status, status_bytes, cudaMemcpyDeviceToHost, stream), "status");
  }

  const MemorySplit split_;
  std::shared_ptr<PinnedPool> pool_;
  std::string name_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<Slot*> idle_;
  double kernel_ms_ = 0;
};

}  // namespace

Probe probe() {
  Probe p;
  p.built = true;
  p.toolkit = std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    p.why_none = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error
    return p;
  }
  p.devices = n;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) p.device = prop.name;
  return p;
}

fid::Result<std::unique_ptr<codec::L3BatchDecoder>> make_gpu_decoder(const DecoderOptions& options) {
  Probe p = probe();
  if (p.devices == 0) return fid::Error{ENODEV, "no CUDA device: " + p.why_none};
  if (fid::Status st = check(cudaSetDevice(0), "set device"); !st) return std::move(st).error();
  if (fid::Status st = check(cudaFree(nullptr), "context"); !st) return std::move(st).error();
  auto decoder = std::make_unique<GpuDecoder>(options, "CUDA device 0: " + p.device);
  if (fid::Status started = decoder->start(options.streams); !started) return std::move(started).error();
  return std::unique_ptr<codec::L3BatchDecoder>(std::move(decoder));
}

double kernel_seconds(const codec::L3BatchDecoder& decoder) {
  auto* g = dynamic_cast<const GpuDecoder*>(&decoder);
  return g ? g->kernel_seconds() : 0;
}

}  // namespace fid::gpu
