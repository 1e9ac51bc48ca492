#include <fmt/format.h>

#include <algorithm>

#include "cuda/gpu.h"
#include "cuda/gpu_decoder.h"
#include "cuda/gpu_model_device.h"

namespace fid::gpu {

MemorySplit split_memory(const DecoderOptions& o) {
  const size_t streams = std::max(1u, o.streams);
  return {o.memory_bytes / 2, std::max<size_t>(1, o.memory_bytes / 4 / streams)};
}

fid::Result<std::unique_ptr<codec::L3BatchDecoder>> make_emulated_decoder(const DecoderOptions& options) {
  return start_decoder(std::make_shared<ModelDevice>(DeviceModel{}), options);
}

std::string describe(const Probe& p) {
  if (!p.built) return "CUDA not built in";
  if (p.devices == 0) return fmt::format("CUDA {} built in; no device ({})", p.toolkit, p.why_none);
  return fmt::format("CUDA {} built in; device: {}{}", p.toolkit, p.device,
                     p.devices > 1 ? fmt::format(" (+{} more)", p.devices - 1) : "");
}

}  // namespace fid::gpu
