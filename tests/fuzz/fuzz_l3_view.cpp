// libFuzzer target for L3 payloads and their views: any input is parsed as a payload and, when
// it parses, rendered in every container. Must never crash or touch memory it should not; a
// rendered view always has exactly the size l3_view_size predicts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "codec/l3_view.h"

using namespace fid::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  L3Payload p;
  std::string err;
  if (!parse_l3_payload(in, p, err)) return 0;
  if (uint64_t{p.shape.width} * p.shape.height * p.shape.channels() > (uint64_t{64} << 20)) return 0;
  L3Shape back;
  if (!shape_from_code(shape_code(p.shape), p.shape.width, p.shape.height, back) ||
      shape_code(back) != shape_code(p.shape))
    abort();
  for (ViewFormat f : {ViewFormat::png, ViewFormat::ppm, ViewFormat::npy}) {
    std::vector<uint8_t> out(l3_view_size(p.shape, f));
    bool ok = render_l3_view(p, f, out, err);
    bool ok2 = false;
    std::vector<uint8_t> again = render_l3_view(in, f, err, &ok2);
    if (ok != ok2 || (ok && again != out)) abort();
  }
  return 0;
}
