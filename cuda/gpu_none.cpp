// The build without CUDA (no nvcc found, or FIDELITYFS_CUDA=OFF): nothing to probe.
#include "cuda/gpu.h"

namespace fid::gpu {

Probe probe() { return {}; }

std::unique_ptr<codec::L3BatchDecoder> make_gpu_decoder(const DecoderOptions&, std::string& error) {
  error = "this build has no CUDA decoder (nvcc was not found when it was built)";
  return nullptr;
}

double kernel_seconds(const codec::L3BatchDecoder&) { return 0; }

}  // namespace fid::gpu
