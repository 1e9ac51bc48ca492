#include <fmt/format.h>

#include "cuda/gpu.h"

namespace fid::gpu {

std::string describe(const Probe& p) {
  if (!p.built) return "CUDA not built in";
  if (p.devices == 0) return fmt::format("CUDA {} built in; no device ({})", p.toolkit, p.why_none);
  return fmt::format("CUDA {} built in; device: {}{}", p.toolkit, p.device,
                     p.devices > 1 ? fmt::format(" (+{} more)", p.devices - 1) : "");
}

}  // namespace fid::gpu
