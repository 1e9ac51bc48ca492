#include <fmt/format.h>

#include <algorithm>

#include "cuda/gpu.h"

namespace fid::gpu {

MemorySplit split_memory(const DecoderOptions& o) {
  const size_t streams = std::max(1u, o.streams);
  return {o.memory_bytes / 2, std::max<size_t>(1, o.memory_bytes / 4 / streams)};
}

std::string describe(const Probe& p) {
  if (!p.built) return "CUDA not built in";
  if (p.devices == 0) return fmt::format("CUDA {} built in; no device ({})", p.toolkit, p.why_none);
  return fmt::format("CUDA {} built in; device: {}{}", p.toolkit, p.device,
                     p.devices > 1 ? fmt::format(" (+{} more)", p.devices - 1) : "");
}

}  // namespace fid::gpu
