// Source image readers (PNG via libspng, BMP, PNM) and raw-view writers (PNM, NPY, stored PNG).
#include "codec/image_io.h"

#include <spng.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>

namespace fid::codec {
namespace {

fid::Error invalid(std::string message) { return fid::Error{EINVAL, std::move(message)}; }

// libspng's reason for a failure.
fid::Error png_failure(int rc) {
  return fid::Error{rc == SPNG_EMEM ? ENOMEM : EINVAL, std::string("PNG: ") + spng_strerror(rc)};
}

fid::Status check_size(uint64_t w, uint64_t h, uint64_t c, const DecodeLimits& lim) {
  if (w == 0 || h == 0) return invalid("image has zero width or height");
  if (w > lim.max_dimension || h > lim.max_dimension) return invalid("image dimensions exceed the limit");
  if (w * h * c > lim.max_bytes) return invalid("decoded image would exceed the size limit");
  return {};
}

uint32_t rd_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint32_t rd_le16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 3; i >= 0; --i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
}

struct Crc32 {
  std::array<uint32_t, 256> table{};
  Crc32() {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[n] = c;
    }
  }
  uint32_t update(uint32_t crc, const uint8_t* p, size_t n) const {
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
  }
};
const Crc32& crc_table() {
  static const Crc32 t;
  return t;
}

}  // namespace

SourceFormat sniff_image(std::span<const uint8_t> d) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (d.size() >= 8 && std::memcmp(d.data(), png_sig, 8) == 0) return SourceFormat::png;
  if (d.size() >= 2 && d[0] == 'B' && d[1] == 'M') return SourceFormat::bmp;
  if (d.size() >= 2 && d[0] == 'P' && (d[1] == '5' || d[1] == '6')) return SourceFormat::pnm;
  return SourceFormat::unknown;
}

fid::Result<SourceImage> decode_image(std::span<const uint8_t> data, const DecodeLimits& limits) {
  switch (sniff_image(data)) {
    case SourceFormat::png: return decode_png(data, limits);
    case SourceFormat::bmp: return decode_bmp(data, limits);
    case SourceFormat::pnm: return decode_pnm(data, limits);
    default: return invalid("not a PNG, BMP or binary PNM image");
  }
}

// ---- PNG --------------------------------------------------------------------------------------

fid::Result<SourceImage> decode_png(std::span<const uint8_t> data, const DecodeLimits& limits) {
  SourceImage out;
  std::unique_ptr<spng_ctx, void (*)(spng_ctx*)> ctx(spng_ctx_new(0), spng_ctx_free);
  if (!ctx) return fid::Error{ENOMEM, "PNG: out of memory"};
  spng_set_image_limits(ctx.get(), limits.max_dimension, limits.max_dimension);
  spng_set_chunk_limits(ctx.get(), 64u << 20, 256u << 20);
  int rc = spng_set_png_buffer(ctx.get(), data.data(), data.size());
  spng_ihdr ihdr{};
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  if (rc) return png_failure(rc);
  if (ihdr.bit_depth > 8) return invalid("PNG: 16-bit samples are not supported");
  unsigned channels = 0;
  const char* mode = "";  // assigned once below: GCC 12 warns falsely (-Wrestrict) on string = literal
  switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: channels = 1; mode = ihdr.bit_depth == 1 ? "1" : "L"; break;
    case SPNG_COLOR_TYPE_INDEXED: channels = 1; mode = "P"; break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: channels = 2; mode = "LA"; break;
    case SPNG_COLOR_TYPE_TRUECOLOR: channels = 3; mode = "RGB"; break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: channels = 4; mode = "RGBA"; break;
    default: return invalid("PNG: unknown colour type");
  }
  out.pil_mode.assign(mode, std::strlen(mode));
  if (fid::Status fits = check_size(ihdr.width, ihdr.height, channels, limits); !fits)
    return std::move(fits).error();
  size_t size = 0;
  rc = spng_decoded_image_size(ctx.get(), SPNG_FMT_PNG, &size);
  if (rc) return png_failure(rc);
  const size_t w = ihdr.width, h = ihdr.height;
  const size_t packed_row = (w * channels * ihdr.bit_depth + 7) / 8;
  if (size != packed_row * h) return invalid("PNG: unexpected decoded size");
  std::vector<uint8_t> raw(size);
  rc = spng_decode_image(ctx.get(), raw.data(), raw.size(), SPNG_FMT_PNG, 0);
  // Read on to IEND so that a file cut after its image data is rejected too.
  if (rc == 0) rc = spng_decode_chunks(ctx.get());
  if (rc) return png_failure(rc);

  Image& im = out.image;
  im.width = ihdr.width;
  im.height = ihdr.height;
  im.channels = static_cast<uint8_t>(channels);
  if (ihdr.bit_depth == 8) {
    im.pixels = std::move(raw);
  } else {
    // 1/2/4-bit gray or palette: MSB-first samples. Gray is scaled to 0..255 as PIL does.
    const unsigned bd = ihdr.bit_depth;
    const unsigned mask = (1u << bd) - 1;
    const unsigned scale = ihdr.color_type == SPNG_COLOR_TYPE_INDEXED ? 1u : 255u / mask;
    im.pixels.resize(w * h);
    for (size_t y = 0; y < h; ++y) {
      const uint8_t* src = raw.data() + y * packed_row;
      uint8_t* dst = im.pixels.data() + y * w;
      for (size_t x = 0; x < w; ++x) {
        size_t bit = x * bd;
        unsigned v = (src[bit >> 3] >> (8 - bd - (bit & 7))) & mask;
        dst[x] = static_cast<uint8_t>(v * scale);
      }
    }
  }
  out.bilevel = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 1;
  if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED) {
    out.palette_indices = true;
    spng_plte plte{};
    if (spng_get_plte(ctx.get(), &plte) == 0) {
      for (uint32_t i = 0; i < plte.n_entries; ++i) {
        out.palette.push_back(plte.entries[i].red);
        out.palette.push_back(plte.entries[i].green);
        out.palette.push_back(plte.entries[i].blue);
      }
    }
    spng_trns trns{};
    if (spng_get_trns(ctx.get(), &trns) == 0)
      out.palette_alpha.assign(trns.type3_alpha, trns.type3_alpha + trns.n_type3_entries);
  }
  out.format = SourceFormat::png;
  return out;
}

// ---- BMP --------------------------------------------------------------------------------------

fid::Result<SourceImage> decode_bmp(std::span<const uint8_t> d, const DecodeLimits& limits) {
  SourceImage out;
  if (d.size() < 14 + 40 || d[0] != 'B' || d[1] != 'M') return invalid("BMP: truncated header");
  const uint32_t pix_off = rd_le32(&d[10]);
  const uint32_t hdr_size = rd_le32(&d[14]);
  if (hdr_size < 40 || 14 + uint64_t{hdr_size} > d.size())
    return invalid("BMP: unsupported or truncated info header");
  const auto width = static_cast<int32_t>(rd_le32(&d[18]));
  const auto height = static_cast<int32_t>(rd_le32(&d[22]));
  const uint32_t planes = rd_le16(&d[26]), bpp = rd_le16(&d[28]), comp = rd_le32(&d[30]);
  if (planes != 1) return invalid("BMP: planes != 1");
  if (bpp != 24 && bpp != 32) return invalid("BMP: only 24- and 32-bit images are supported");
  unsigned channels = 3;
  bool alpha = false;
  if (comp == 3 && bpp == 32) {  // BI_BITFIELDS
    // Masks follow a 40-byte header, or are inside V4/V5 headers at the same place.
    if (14 + 40 + 16 > d.size()) return invalid("BMP: truncated bitfield masks");
    uint32_t rm = rd_le32(&d[54]), gm = rd_le32(&d[58]), bm = rd_le32(&d[62]);
    uint32_t am = hdr_size >= 56 ? rd_le32(&d[66]) : 0;
    if (rm != 0xFF0000u || gm != 0xFF00u || bm != 0xFFu || (am != 0 && am != 0xFF000000u))
      return invalid("BMP: unsupported bitfield masks");
    alpha = am != 0;
  } else if (comp != 0) {
    return invalid("BMP: compressed BMP is not supported");
  }
  if (alpha) channels = 4;
  if (width <= 0 || height == 0 || height == INT32_MIN) return invalid("BMP: bad dimensions");
  const bool top_down = height < 0;
  const uint64_t w = static_cast<uint64_t>(width);
  const uint64_t h = top_down ? static_cast<uint64_t>(-static_cast<int64_t>(height))
                              : static_cast<uint64_t>(height);
  if (fid::Status fits = check_size(w, h, channels, limits); !fits) return std::move(fits).error();
  const uint64_t stride = (w * bpp + 31) / 32 * 4;
  if (pix_off > d.size() || stride * h > d.size() - pix_off)
    return invalid("BMP: truncated pixel data");
  Image& im = out.image;
  im.width = static_cast<uint32_t>(w);
  im.height = static_cast<uint32_t>(h);
  im.channels = static_cast<uint8_t>(channels);
  im.pixels.resize(w * h * channels);
  const unsigned bytes = bpp / 8;
  for (uint64_t y = 0; y < h; ++y) {
    const uint8_t* src = d.data() + pix_off + stride * (top_down ? y : h - 1 - y);
    uint8_t* dst = im.pixels.data() + y * w * channels;
    for (uint64_t x = 0; x < w; ++x, src += bytes, dst += channels) {
      dst[0] = src[2];
      dst[1] = src[1];
      dst[2] = src[0];
      if (alpha) dst[3] = src[3];
    }
  }
  out.pil_mode = alpha ? "RGBA" : "RGB";
  out.format = SourceFormat::bmp;
  return out;
}

// ---- PNM --------------------------------------------------------------------------------------

fid::Result<SourceImage> decode_pnm(std::span<const uint8_t> d, const DecodeLimits& limits) {
  SourceImage out;
  if (d.size() < 2 || d[0] != 'P' || (d[1] != '5' && d[1] != '6'))
    return invalid("PNM: only binary P5/P6 are supported");
  const unsigned channels = d[1] == '6' ? 3 : 1;
  size_t pos = 2;
  uint64_t vals[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    // Whitespace and comments before each number.
    for (;;) {
      if (pos >= d.size()) return invalid("PNM: truncated header");
      uint8_t c = d[pos];
      if (c == '#') {
        while (pos < d.size() && d[pos] != '\n' && d[pos] != '\r') ++pos;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++pos;
      } else {
        break;
      }
    }
    if (d[pos] < '0' || d[pos] > '9') return invalid("PNM: bad header number");
    uint64_t v = 0;
    while (pos < d.size() && d[pos] >= '0' && d[pos] <= '9') {
      v = v * 10 + (d[pos] - '0');
      if (v > (uint64_t{1} << 32)) return invalid("PNM: header number too large");
      ++pos;
    }
    vals[k] = v;
  }
  if (pos >= d.size() || !(d[pos] == ' ' || d[pos] == '\t' || d[pos] == '\n' || d[pos] == '\r'))
    return invalid("PNM: truncated header");
  ++pos;  // exactly one whitespace byte before the raster
  const uint64_t w = vals[0], h = vals[1], maxval = vals[2];
  if (maxval < 1 || maxval > 255) return invalid("PNM: only maxval 1..255 is supported");
  if (fid::Status fits = check_size(w, h, channels, limits); !fits) return std::move(fits).error();
  const uint64_t n = w * h * channels;
  if (d.size() - pos < n) return invalid("PNM: truncated pixel data");
  Image& im = out.image;
  im.width = static_cast<uint32_t>(w);
  im.height = static_cast<uint32_t>(h);
  im.channels = static_cast<uint8_t>(channels);
  im.pixels.assign(d.begin() + static_cast<std::ptrdiff_t>(pos),
                   d.begin() + static_cast<std::ptrdiff_t>(pos + n));
  if (maxval != 255) {
    // Pillow: min(255, round(value / maxval * 255)) with round-half-to-even on doubles.
    std::array<uint8_t, 256> lut{};
    for (unsigned v = 0; v < 256; ++v) {
      double s = std::nearbyint(static_cast<double>(v) / static_cast<double>(maxval) * 255.0);
      lut[v] = static_cast<uint8_t>(s > 255.0 ? 255.0 : s);
    }
    for (auto& p : im.pixels) p = lut[p];
  }
  out.pil_mode = channels == 3 ? "RGB" : "L";
  out.format = SourceFormat::pnm;
  return out;
}

// ---- writers ----------------------------------------------------------------------------------

std::vector<uint8_t> pnm_header(uint32_t width, uint32_t height, uint8_t channels) {
  std::string h;
  if (channels == 1 || channels == 3) {
    h = std::string(channels == 1 ? "P5" : "P6") + "\n" + std::to_string(width) + " " +
        std::to_string(height) + "\n255\n";
  } else {
    h = "P7\nWIDTH " + std::to_string(width) + "\nHEIGHT " + std::to_string(height) + "\nDEPTH " +
        std::to_string(channels) + "\nMAXVAL 255\nTUPLTYPE " +
        (channels == 2 ? "GRAYSCALE_ALPHA" : "RGB_ALPHA") + "\nENDHDR\n";
  }
  return {h.begin(), h.end()};
}

std::vector<uint8_t> npy_header(uint32_t width, uint32_t height, uint8_t channels) {
  // fmt-free formatting without string-literal concatenation (GCC 12 -Wrestrict false positive).
  std::string shape = "(";
  shape += std::to_string(height);
  shape += ", ";
  shape += std::to_string(width);
  if (channels != 1) {
    shape += ", ";
    shape += std::to_string(channels);
  }
  shape += ")";
  std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::vector<uint8_t> h = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  h.push_back(static_cast<uint8_t>(dict.size()));
  h.push_back(static_cast<uint8_t>(dict.size() >> 8));
  h.insert(h.end(), dict.begin(), dict.end());
  return h;
}

std::vector<uint8_t> encode_pnm(const Image& im) {
  auto out = pnm_header(im.width, im.height, im.channels);
  out.insert(out.end(), im.pixels.begin(), im.pixels.end());
  return out;
}

std::vector<uint8_t> encode_npy(const Image& im) {
  auto out = npy_header(im.width, im.height, im.channels);
  out.insert(out.end(), im.pixels.begin(), im.pixels.end());
  return out;
}

namespace {
constexpr size_t kStoredBlock = 65535;
size_t zlib_stored_size(size_t n) {
  size_t blocks = n == 0 ? 1 : (n + kStoredBlock - 1) / kStoredBlock;
  return 2 + n + 5 * blocks + 4;
}
}  // namespace

size_t png_stored_size(uint32_t width, uint32_t height, uint8_t channels, size_t palette_entries,
                       size_t alpha_entries) {
  size_t raw = (size_t{width} * channels + 1) * height;
  size_t size = 8 + (12 + 13) + (12 + zlib_stored_size(raw)) + 12;
  if (palette_entries) size += 12 + 3 * palette_entries;
  if (alpha_entries) size += 12 + alpha_entries;
  return size;
}

std::vector<uint8_t> encode_png_stored(const Image& im, std::span<const uint8_t> palette,
                                       std::span<const uint8_t> palette_alpha) {
  const size_t pal_entries = palette.size() / 3;
  const bool indexed = pal_entries > 0 && im.channels == 1;
  std::vector<uint8_t> out;
  out.reserve(png_stored_size(im.width, im.height, im.channels, indexed ? pal_entries : 0,
                              indexed ? palette_alpha.size() : 0));
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  out.insert(out.end(), sig, sig + 8);
  const Crc32& crc = crc_table();
  auto chunk = [&](const char* type, auto&& write_body, size_t len) {
    put_be32(out, static_cast<uint32_t>(len));
    size_t start = out.size();
    out.insert(out.end(), type, type + 4);
    write_body();
    put_be32(out, crc.update(0, out.data() + start, out.size() - start));
  };
  static const uint8_t color_type[5] = {0, 0, 4, 2, 6};
  chunk("IHDR", [&] {
    put_be32(out, im.width);
    put_be32(out, im.height);
    out.push_back(8);
    out.push_back(indexed ? 3 : color_type[im.channels]);
    out.push_back(0);
    out.push_back(0);
    out.push_back(0);
  }, 13);
  if (indexed) {
    chunk("PLTE", [&] { out.insert(out.end(), palette.begin(), palette.begin() + 3 * static_cast<std::ptrdiff_t>(pal_entries)); },
          3 * pal_entries);
    if (!palette_alpha.empty())
      chunk("tRNS", [&] { out.insert(out.end(), palette_alpha.begin(), palette_alpha.end()); },
            palette_alpha.size());
  }
  const size_t row = size_t{im.width} * im.channels;
  const size_t raw = (row + 1) * im.height;
  chunk("IDAT", [&] {
    out.push_back(0x78);
    out.push_back(0x01);
    uint32_t a = 1, b = 0;  // adler32
    size_t done = 0, y = 0, in_row = 0;  // in_row: bytes of the current row emitted (0 = filter)
    do {
      size_t n = std::min(kStoredBlock, raw - done);
      out.push_back(done + n == raw ? 1 : 0);
      out.push_back(static_cast<uint8_t>(n));
      out.push_back(static_cast<uint8_t>(n >> 8));
      out.push_back(static_cast<uint8_t>(~n));
      out.push_back(static_cast<uint8_t>(~n >> 8));
      size_t left = n;
      while (left) {
        if (in_row == 0) {
          out.push_back(0);
          b = (b + a) % 65521;
          in_row = 1;
          --left;
          continue;
        }
        size_t take = std::min(left, row + 1 - in_row);
        const uint8_t* src = im.pixels.data() + y * row + (in_row - 1);
        out.insert(out.end(), src, src + take);
        for (size_t i = 0; i < take; ++i) {
          a += src[i];
          if (a >= 65521) a -= 65521;
          b = (b + a) % 65521;
        }
        in_row += take;
        left -= take;
        if (in_row == row + 1) {
          in_row = 0;
          ++y;
        }
      }
      done += n;
    } while (done < raw);
    put_be32(out, (b << 16) | a);
  }, zlib_stored_size(raw));
  chunk("IEND", [] {}, 0);
  return out;
}

}  // namespace fid::codec
