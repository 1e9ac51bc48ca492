// The CUDA device of the GPU L3 decoder (cuda/gpu_device.h): one thread block per patch
// (codec/l3_block.h, the same code the CPU emulation runs), streams with timing events.
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "codec/l3_batch.h"
#include "codec/l3_block.h"
#include "common/error.h"
#include "cuda/gpu.h"
#include "cuda/gpu_decoder.h"
#include "cuda/gpu_device.h"

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

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(std::string name) : name_(std::move(name)) {}
  ~CudaDevice() override {
    for (Stream& s : streams_) {
      if (s.start) cudaEventDestroy(s.start);
      if (s.stop) cudaEventDestroy(s.stop);
      if (s.stream) cudaStreamDestroy(s.stream);
    }
  }
  std::string name() const override { return name_; }

  fid::Result<uint8_t*> alloc_host(size_t bytes) override {
    void* p = nullptr;
    if (fid::Status st = check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "pinned allocation"); !st)
      return std::move(st).error();
    return static_cast<uint8_t*>(p);
  }
  void free_host(uint8_t* p) override { cudaFreeHost(p); }
  fid::Result<uint8_t*> alloc_device(size_t bytes) override {
    void* p = nullptr;
    if (fid::Status st = check(cudaMalloc(&p, bytes), "device allocation"); !st) return std::move(st).error();
    return static_cast<uint8_t*>(p);
  }
  void free_device(uint8_t* p) override { cudaFree(p); }

  // Streams are made at start, before any read; their vector does not change after.
  fid::Result<unsigned> create_stream() override {
    std::lock_guard lock(mu_);
    Stream& s = streams_.emplace_back();  // the destructor frees what was made
    if (fid::Status st = check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "stream"); !st)
      return std::move(st).error();
    if (fid::Status st = check(cudaEventCreate(&s.start), "event"); !st) return std::move(st).error();
    if (fid::Status st = check(cudaEventCreate(&s.stop), "event"); !st) return std::move(st).error();
    return static_cast<unsigned>(streams_.size() - 1);
  }
  fid::Status upload(unsigned i, uint8_t* dev, const uint8_t* host, size_t bytes) override {
    return check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, streams_[i].stream), "upload");
  }
  fid::Status zero(unsigned i, uint8_t* dev, size_t bytes) override {
    return check(cudaMemsetAsync(dev, 0, bytes, streams_[i].stream), "memset");
  }
  fid::Status launch(unsigned i, const KernelArgs& k) override {
    const Stream& s = streams_[i];
    if (fid::Status st = check(cudaEventRecord(s.start, s.stream), "event"); !st) return st;
    decode_patches<<<static_cast<unsigned>(k.blocks), kBlockThreads, 0, s.stream>>>(
        reinterpret_cast<const l3k::PatchTask*>(k.tasks), k.data, reinterpret_cast<const l3k::HuffTable*>(k.tables),
        k.out, k.status);
    if (fid::Status st = check(cudaGetLastError(), "kernel launch"); !st) return st;
    return check(cudaEventRecord(s.stop, s.stream), "event");
  }
  fid::Status download(unsigned i, uint8_t* host, const uint8_t* dev, size_t bytes) override {
    return check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, streams_[i].stream), "download");
  }
  // The context was made with blocking synchronisation: this thread sleeps, it does not spin.
  fid::Result<double> finish(unsigned i) override {
    const Stream& s = streams_[i];
    if (fid::Status st = check(cudaStreamSynchronize(s.stream), "kernel"); !st) return std::move(st).error();
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s.start, s.stop) != cudaSuccess) ms = 0;
    return static_cast<double>(ms);
  }

 private:
  struct Stream {
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  const std::string name_;
  std::mutex mu_;
  std::vector<Stream> streams_;
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
  // Waiting threads sleep on the driver instead of spinning a core each; set before the context.
  if (fid::Status st = check(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), "device flags"); !st)
    return std::move(st).error();
  if (fid::Status st = check(cudaFree(nullptr), "context"); !st) return std::move(st).error();
  return start_decoder(std::make_shared<CudaDevice>("CUDA device 0: " + p.device), options);
}

}  // namespace fid::gpu
