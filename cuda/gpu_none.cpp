// The build without CUDA (no nvcc found, or FIDELITYFS_CUDA=OFF): nothing to probe.
#include <cerrno>

#include "cuda/gpu.h"

namespace fid::gpu {

Probe probe() { return {}; }

fid::Result<std::unique_ptr<codec::L3BatchDecoder>> make_gpu_decoder(const DecoderOptions&) {
  return fid::Error{ENOTSUP, "this build has no CUDA decoder (nvcc was not found when it was built)"};
}

}  // namespace fid::gpu
