// libFuzzer target for L3 payloads and their views: any input is parsed as a payload and, when
// it parses, rendered in every container. Must never crash or touch memory it should not; a
// rendered view always has exactly the size l3_view_size predicts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/l3_view.h"

using namespace fid::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  const fid::Result<L3Payload> parsed = parse_l3_payload(in);
  if (!parsed) return 0;
  const L3Payload& p = *parsed;
  if (uint64_t{p.shape.width} * p.shape.height * p.shape.channels() > (uint64_t{64} << 20)) return 0;
  L3Shape back;
  if (!shape_from_code(shape_code(p.shape), p.shape.width, p.shape.height, back).ok() ||
      shape_code(back) != shape_code(p.shape))
    abort();
  for (ViewFormat f : {ViewFormat::png, ViewFormat::ppm, ViewFormat::npy}) {
    std::vector<uint8_t> out(l3_view_size(p.shape, f));
    const bool ok = render_l3_view(p, f, out).ok();
    const fid::Result<std::vector<uint8_t>> again = render_l3_view(in, f);
    if (ok != again.ok() || (ok && *again != out)) abort();
  }
  return 0;
}
