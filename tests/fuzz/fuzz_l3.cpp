// libFuzzer target for the L3 decoder. Input byte 0 selects the mode:
//   even: the rest is an L3 stream; decode it (must never crash or touch memory it should not;
//         a stream that decodes must also probe to the same size).
//   odd:  the rest makes an image (3 bytes: width-1, height-1, channels; then pixels, cycled)
//         and options; encode, decode, and abort unless the pixels come back exactly.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "codec/l3.h"

using namespace fid::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::span<const uint8_t> rest(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    Image out;
    std::string err;
    L3Info info;
    bool probed = l3_probe(rest, info, err);
    if (probed && info.raw_bytes() > (size_t{64} << 20)) return 0;  // keep allocations modest
    bool ok = l3_decode(rest, out, err);
    if (ok && (!probed || out.pixels.size() != info.raw_bytes())) abort();
    return 0;
  }
  if (rest.size() < 3) return 0;
  Image im;
  im.width = rest[0] % 40u + 1;
  im.height = rest[1] % 40u + 1;
  im.channels = static_cast<uint8_t>(rest[2] % 4u + 1);
  auto px = rest.subspan(3);
  im.pixels.resize(im.byte_size());
  for (size_t i = 0; i < im.pixels.size(); ++i)
    im.pixels[i] = px.empty() ? 0 : px[i % px.size()];
  L3Options opt;
  opt.patch_size = (data[0] >> 1) % 40u + 1;
  opt.segment_log2 = static_cast<uint8_t>(3 + (data[0] >> 6) % 4u);
  opt.entropy_codes = px.size() % 2 ? 2 : 1;
  opt.inter_patch_rows = (data[0] & 2) != 0;
  auto enc = l3_encode(im, opt);
  Image back;
  std::string err;
  if (!l3_decode(enc, back, err) || back.pixels != im.pixels || back.width != im.width ||
      back.height != im.height || back.channels != im.channels)
    abort();
  return 0;
}
