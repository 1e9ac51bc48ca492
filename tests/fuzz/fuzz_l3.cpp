// libFuzzer target for the L3 decoder. Input byte 0 selects the mode:
//   even: the rest is an L3 stream; decode it (must never crash or touch memory it should not;
//         a stream that decodes must also probe to the same size). With bit 1 of byte 0 set,
//         the data size field and the patch offsets are first made consistent with the input's
//         length, so that mutations reach the patch data checks (rows past their patch, bytes
//         left over) instead of the size check.
//   odd:  the rest makes an image (3 bytes: width-1, height-1, channels; then pixels, cycled)
//         and options (their spare bits: version 1 or 2, version 2's tools); encode, decode,
//         and abort unless the pixels come back exactly.
// Both modes also run the block decoder's CPU emulation (codec/l3_block_plan.h; the last input
// byte picks its thread count and order) on images without INTER_PATCH, and abort unless it succeeds
// exactly when the CPU decoder does, with the same pixels.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/l3.h"
#include "codec/l3_block_plan.h"

using namespace fid::codec;

namespace {

// Aborts unless the emulated block decoder agrees with the CPU decoder's outcome `cpu_ok`
// (and its pixels `cpu` when it succeeded).
void check_block(std::span<const uint8_t> l3, bool cpu_ok, const std::vector<uint8_t>& cpu,
                 uint8_t selector) {
  const fid::Result<L3Info> info = l3_probe(l3);
  if (!info) {
    if (cpu_ok) abort();
    return;
  }
  if (info->flags & kL3FlagInterPatch) return;  // not block-decodable (CPU fallback)
  std::vector<uint8_t> out(info->raw_bytes());
  const unsigned threads = 1u + (selector >> 1) % 48u;
  const bool ok = l3_decode_emulated(l3, out, threads, (selector & 1) != 0).ok();
  if (ok != cpu_ok || (ok && out != cpu)) abort();
}

uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Sets the header's data size D to what follows the offset table and clamps the offsets to D.
void fix_sizes(std::vector<uint8_t>& f) {
  if (f.size() < kL3HeaderBytes) return;
  const uint64_t w = get_u32(&f[8]), h = get_u32(&f[12]), n = f[16] | f[17] << 8;
  if (n == 0 || w == 0 || h == 0 || w > kL3MaxDimension || h > kL3MaxDimension) return;
  const uint64_t patches = ((w + n - 1) / n) * ((h + n - 1) / n);
  const uint64_t table = kL3HeaderBytes + ((f[7] & kL3FlagHuffCodes) ? kL3CodeTableBytes : 0);
  if (table + 4 * patches > f.size()) return;
  const auto d = static_cast<uint32_t>(f.size() - table - 4 * patches);
  put_u32(&f[20], d);
  for (uint64_t i = 0; i < patches; ++i) {
    uint8_t* o = &f[table + 4 * i];
    if (get_u32(o) > d) put_u32(o, d);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::span<const uint8_t> rest(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    std::vector<uint8_t> fixed;
    if (data[0] & 2) {
      fixed.assign(rest.begin(), rest.end());
      fix_sizes(fixed);
      rest = fixed;
    }
    const fid::Result<L3Info> info = l3_probe(rest);
    if (info && info->raw_bytes() > (size_t{64} << 20)) return 0;  // keep allocations modest
    const fid::Result<Image> out = l3_decode(rest);
    if (out && (!info || out->pixels.size() != info->raw_bytes())) abort();
    check_block(rest, out.ok(), out ? out->pixels : std::vector<uint8_t>{}, data[size - 1]);
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
  // Spare bits of the image bytes pick the version and version 2's tools.
  opt.version = (rest[2] & 4) ? 1 : 2;
  if (opt.version == 2 && (rest[2] & 8)) {  // per-patch segment lengths
    opt.segment_log2 = 0;
    opt.segment_mask = static_cast<uint8_t>(((rest[2] >> 4) % 15u + 1) << 3);
  }
  opt.constant_patches = (rest[0] & 0x80) == 0;
  opt.copy_runs = (rest[1] & 0x80) == 0;
  const fid::Result<std::vector<uint8_t>> enc = l3_encode(im, opt);
  if (!enc) abort();  // a valid image with valid options always encodes
  const fid::Result<Image> back = l3_decode(*enc);
  if (!back || back->pixels != im.pixels || back->width != im.width || back->height != im.height ||
      back->channels != im.channels)
    abort();
  check_block(*enc, true, back->pixels, data[size - 1]);
  return 0;
}
