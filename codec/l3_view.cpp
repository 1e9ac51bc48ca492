#include "codec/l3_view.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "codec/l3.h"

namespace fid::codec {

namespace {

constexpr uint8_t kMagic[4] = {'L', '3', 'V', '1'};
constexpr size_t kStoredBlock = 65535;

fid::Error invalid(std::string message) { return fid::Error{EINVAL, std::move(message)}; }

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

void put_be32(uint8_t*& p, uint32_t x) {
  p[0] = static_cast<uint8_t>(x >> 24);
  p[1] = static_cast<uint8_t>(x >> 16);
  p[2] = static_cast<uint8_t>(x >> 8);
  p[3] = static_cast<uint8_t>(x);
  p += 4;
}

// PNG rows of a view: bit depth and bytes per row (without the filter byte).
struct PngLayout {
  uint8_t bit_depth = 8;
  uint8_t color_type = 0;
  size_t row = 0;
};

PngLayout png_layout(const L3Shape& s) {
  PngLayout l;
  static const uint8_t color_type[5] = {0, 0, 4, 2, 6};
  if (s.mode == PilMode::bilevel) {
    l.bit_depth = 1;
    l.color_type = 0;
    l.row = (size_t{s.width} + 7) / 8;
  } else {
    l.color_type = s.mode == PilMode::P ? 3 : color_type[s.channels()];
    l.row = size_t{s.width} * s.channels();
  }
  return l;
}

size_t zlib_stored_size(size_t n) {
  size_t blocks = n == 0 ? 1 : (n + kStoredBlock - 1) / kStoredBlock;
  return 2 + n + 5 * blocks + 4;
}

uint64_t png_size(const L3Shape& s) {
  PngLayout l = png_layout(s);
  size_t raw = (l.row + 1) * s.height;
  uint64_t size = 8 + (12 + 13) + (12 + zlib_stored_size(raw)) + 12;
  if (s.mode == PilMode::P) {
    size += 12 + 3 * uint64_t{s.palette_entries};
    if (s.alpha_entries) size += 12 + uint64_t{s.alpha_entries};
  }
  return size;
}

// Writes a chunk whose body `body(p)` writes exactly `len` bytes at p.
template <typename F>
void chunk(uint8_t*& p, const char* type, size_t len, F&& body) {
  put_be32(p, static_cast<uint32_t>(len));
  uint8_t* start = p;
  std::memcpy(p, type, 4);
  p += 4;
  body(p);
  uLong crc = crc32_z(0L, start, static_cast<z_size_t>(p - start));
  put_be32(p, static_cast<uint32_t>(crc));
}

fid::Status decode_pixels(const L3DecodeFn& decode, std::span<const uint8_t> l3, std::span<uint8_t> pixels) {
  return decode ? decode(l3, pixels) : l3_decode_into(l3, pixels);
}

// Mode "1": packs each row's 0/255 samples (width bytes) into MSB-first bits (row_bytes), in
// place.
void pack_bilevel(uint8_t* pixels, size_t width, size_t height, size_t row_bytes) {
  for (size_t y = 0; y < height; ++y) {
    const uint8_t* src = pixels + y * width;
    uint8_t* dst = pixels + y * row_bytes;
    for (size_t bx = 0; bx < row_bytes; ++bx) {
      uint8_t b = 0;
      for (size_t k = 0; k < 8; ++k) {
        size_t x = bx * 8 + k;
        if (x < width && src[x]) b = static_cast<uint8_t>(b | (0x80u >> k));
      }
      dst[bx] = b;  // bx <= x: never overwrites a sample not yet read
    }
  }
}

// The signature, IHDR, and for mode "P" PLTE and tRNS.
void write_png_start(uint8_t*& p, const L3Payload& pl, const PngLayout& l) {
  const L3Shape& s = pl.shape;
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::memcpy(p, sig, 8);
  p += 8;
  chunk(p, "IHDR", 13, [&](uint8_t*& q) {
    put_be32(q, s.width);
    put_be32(q, s.height);
    *q++ = l.bit_depth;
    *q++ = l.color_type;
    *q++ = 0;
    *q++ = 0;
    *q++ = 0;
  });
  if (s.mode != PilMode::P) return;
  chunk(p, "PLTE", pl.palette.size(), [&](uint8_t*& q) {
    std::memcpy(q, pl.palette.data(), pl.palette.size());
    q += pl.palette.size();
  });
  if (!pl.palette_alpha.empty())
    chunk(p, "tRNS", pl.palette_alpha.size(), [&](uint8_t*& q) {
      std::memcpy(q, pl.palette_alpha.data(), pl.palette_alpha.size());
      q += pl.palette_alpha.size();
    });
}

// IDAT's body: a zlib stream of stored blocks holding `height` rows of `row` bytes, each after
// its filter byte (0), exactly zlib_stored_size((row + 1) * height) bytes.
void write_stored_zlib(uint8_t*& q, const uint8_t* rows, size_t row, size_t height) {
  const size_t raw = (row + 1) * height;
  *q++ = 0x78;
  *q++ = 0x01;
  uLong adler = adler32_z(0L, nullptr, 0);
  size_t done = 0, y = 0, in_row = 0;  // in_row: bytes of the current row emitted (0 = filter)
  do {
    size_t n = std::min(kStoredBlock, raw - done);
    *q++ = done + n == raw ? 1 : 0;
    *q++ = static_cast<uint8_t>(n);
    *q++ = static_cast<uint8_t>(n >> 8);
    *q++ = static_cast<uint8_t>(~n);
    *q++ = static_cast<uint8_t>(~n >> 8);
    uint8_t* block = q;
    size_t left = n;
    while (left) {
      if (in_row == 0) {
        *q++ = 0;
        in_row = 1;
        --left;
        continue;
      }
      size_t take = std::min(left, row + 1 - in_row);
      std::memcpy(q, rows + y * row + (in_row - 1), take);
      q += take;
      in_row += take;
      left -= take;
      if (in_row == row + 1) {
        in_row = 0;
        ++y;
      }
    }
    adler = adler32_z(adler, block, n);
    done += n;
  } while (done < raw);
  put_be32(q, static_cast<uint32_t>(adler));
}

fid::Status render_png(const L3Payload& pl, std::span<uint8_t> out, const L3DecodeFn& decode) {
  const L3Shape& s = pl.shape;
  const PngLayout l = png_layout(s);
  // Per-thread scratch for the decoded pixels; one of more than 32 MiB is freed after use so that
  // many threads do not each keep the largest image they ever saw.
  thread_local std::vector<uint8_t> pixels;
  const size_t px_bytes = size_t{s.width} * s.height * s.channels();
  struct Release {
    size_t n;
    ~Release() {
      if (n > (size_t{32} << 20)) std::vector<uint8_t>().swap(pixels);
    }
  } release{px_bytes};
  pixels.resize(px_bytes);
  if (fid::Status decoded = decode_pixels(decode, pl.l3, pixels); !decoded) return decoded;
  if (s.mode == PilMode::bilevel) pack_bilevel(pixels.data(), s.width, s.height, l.row);
  uint8_t* p = out.data();
  write_png_start(p, pl, l);
  chunk(p, "IDAT", zlib_stored_size((l.row + 1) * s.height),
        [&](uint8_t*& q) { write_stored_zlib(q, pixels.data(), l.row, s.height); });
  chunk(p, "IEND", 0, [](uint8_t*&) {});
  if (static_cast<size_t>(p - out.data()) != out.size()) return fid::Error{EIO, "internal error: PNG view size mismatch"};
  return {};
}

}  // namespace

std::string_view pil_mode_name(PilMode m) {
  switch (m) {
    case PilMode::bilevel: return "1";
    case PilMode::L: return "L";
    case PilMode::P: return "P";
    case PilMode::LA: return "LA";
    case PilMode::RGB: return "RGB";
    case PilMode::RGBA: return "RGBA";
  }
  return "?";
}

uint8_t pil_mode_channels(PilMode m) {
  switch (m) {
    case PilMode::bilevel:
    case PilMode::L:
    case PilMode::P: return 1;
    case PilMode::LA: return 2;
    case PilMode::RGB: return 3;
    case PilMode::RGBA: return 4;
  }
  return 0;
}

uint32_t shape_code(const L3Shape& s) {
  return static_cast<uint32_t>(s.mode) | uint32_t{s.palette_entries} << 8 | uint32_t{s.alpha_entries} << 20;
}

fid::Status shape_from_code(uint32_t code, uint32_t width, uint32_t height, L3Shape& out) {
  uint32_t mode = code & 0xff, pal = (code >> 8) & 0xfff, alpha = code >> 20;
  if (mode > static_cast<uint32_t>(PilMode::RGBA) || pal > 256 || alpha > pal ||
      (mode == static_cast<uint32_t>(PilMode::P)) != (pal > 0))
    return invalid("bad L3 shape code " + std::to_string(code));
  out.width = width;
  out.height = height;
  out.mode = static_cast<PilMode>(mode);
  out.palette_entries = static_cast<uint16_t>(pal);
  out.alpha_entries = static_cast<uint16_t>(alpha);
  return {};
}

fid::Result<std::vector<uint8_t>> encode_l3_payload(const SourceImage& src, const L3Options* options) {
  PilMode mode;
  const std::string& m = src.pil_mode;
  if (m == "1") mode = PilMode::bilevel;
  else if (m == "L") mode = PilMode::L;
  else if (m == "P") mode = PilMode::P;
  else if (m == "LA") mode = PilMode::LA;
  else if (m == "RGB") mode = PilMode::RGB;
  else if (m == "RGBA") mode = PilMode::RGBA;
  else return invalid("unsupported PIL mode '" + m + "'");
  if (src.image.channels != pil_mode_channels(mode)) return invalid("channel count does not match PIL mode " + m);
  size_t pal = 0, alpha = 0;
  if (mode == PilMode::P) {
    pal = src.palette.size() / 3;
    alpha = std::min(src.palette_alpha.size(), pal);
    if (pal == 0 || pal > 256 || src.palette.size() % 3) return invalid("bad palette");
  }
  fid::Result<std::vector<uint8_t>> encoded = options ? l3_encode(src.image, *options) : l3_encode(src.image);
  if (!encoded) return std::move(encoded).error();
  const std::vector<uint8_t>& l3 = *encoded;
  // One allocation, then plain copies (GCC 12 warns falsely on vector::insert after push_back).
  std::vector<uint8_t> out(kL3PayloadPrefix + 3 * pal + alpha + l3.size(), 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 4);
  p[4] = static_cast<uint8_t>(mode);
  p[6] = static_cast<uint8_t>(pal);
  p[7] = static_cast<uint8_t>(pal >> 8);
  p[8] = static_cast<uint8_t>(alpha);
  p[9] = static_cast<uint8_t>(alpha >> 8);
  p += kL3PayloadPrefix;
  if (pal) std::memcpy(p, src.palette.data(), 3 * pal);
  p += 3 * pal;
  if (alpha) std::memcpy(p, src.palette_alpha.data(), alpha);
  p += alpha;
  std::memcpy(p, l3.data(), l3.size());
  return out;
}

fid::Result<L3Payload> parse_l3_payload(std::span<const uint8_t> d) {
  if (d.size() < kL3PayloadPrefix || std::memcmp(d.data(), kMagic, 4) != 0)
    return invalid("not an L3 payload (bad magic or too short)");
  if (d[4] > static_cast<uint8_t>(PilMode::RGBA)) return invalid("L3 payload: unknown mode");
  if (d[5] != 0 || d[10] != 0 || d[11] != 0) return invalid("L3 payload: reserved bytes not zero");
  const PilMode mode = static_cast<PilMode>(d[4]);
  const uint16_t pal = rd16(d.data() + 6), alpha = rd16(d.data() + 8);
  if (pal > 256 || alpha > pal || (mode == PilMode::P) != (pal > 0))
    return invalid("L3 payload: bad palette size");
  const size_t head = kL3PayloadPrefix + 3 * size_t{pal} + alpha;
  if (d.size() < head) return invalid("L3 payload: truncated palette");
  fid::Result<L3Info> probed = l3_probe(d.subspan(head));
  if (!probed) return std::move(probed).error();
  if (probed->channels != pil_mode_channels(mode)) return invalid("L3 payload: channels do not match the mode");
  L3Payload out;
  out.shape = L3Shape{probed->width, probed->height, mode, pal, alpha};
  out.palette = d.subspan(kL3PayloadPrefix, 3 * size_t{pal});
  out.palette_alpha = d.subspan(kL3PayloadPrefix + 3 * size_t{pal}, alpha);
  out.l3 = d.subspan(head);
  return out;
}

std::string_view view_format_name(ViewFormat f) {
  switch (f) {
    case ViewFormat::png: return "png";
    case ViewFormat::ppm: return "ppm";
    case ViewFormat::npy: return "npy";
  }
  return "?";
}

ViewFormat effective_view_format(const L3Shape& s, ViewFormat requested) {
  if (requested == ViewFormat::ppm && s.channels() != 1 && s.channels() != 3) return ViewFormat::png;
  return requested;
}

std::string_view view_extension(const L3Shape& s, ViewFormat requested) {
  switch (effective_view_format(s, requested)) {
    case ViewFormat::png: return ".png";
    case ViewFormat::ppm: return s.channels() == 1 ? ".pgm" : ".ppm";
    case ViewFormat::npy: return ".npy";
  }
  return "";
}

uint64_t l3_view_size(const L3Shape& s, ViewFormat requested) {
  const uint64_t px = uint64_t{s.width} * s.height * s.channels();
  switch (effective_view_format(s, requested)) {
    case ViewFormat::png: return png_size(s);
    case ViewFormat::ppm: return pnm_header(s.width, s.height, s.channels()).size() + px;
    case ViewFormat::npy: return npy_header(s.width, s.height, s.channels()).size() + px;
  }
  return 0;
}

fid::Status render_l3_view(const L3Payload& p, ViewFormat requested, std::span<uint8_t> out,
                           const L3DecodeFn& decode) {
  if (out.size() != l3_view_size(p.shape, requested)) return invalid("view buffer has the wrong size");
  const ViewFormat f = effective_view_format(p.shape, requested);
  if (f == ViewFormat::png) return render_png(p, out, decode);
  std::vector<uint8_t> head = f == ViewFormat::ppm ? pnm_header(p.shape.width, p.shape.height, p.shape.channels())
                                                   : npy_header(p.shape.width, p.shape.height, p.shape.channels());
  std::memcpy(out.data(), head.data(), head.size());
  return decode_pixels(decode, p.l3, out.subspan(head.size()));
}

fid::Result<std::vector<uint8_t>> render_l3_view(std::span<const uint8_t> payload, ViewFormat requested) {
  fid::Result<L3Payload> p = parse_l3_payload(payload);
  if (!p) return std::move(p).error();
  std::vector<uint8_t> out(l3_view_size(p->shape, requested));
  if (fid::Status rendered = render_l3_view(*p, requested, out); !rendered) return std::move(rendered).error();
  return out;
}

}  // namespace fid::codec
