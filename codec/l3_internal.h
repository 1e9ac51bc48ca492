// Internal to the L3 codec (codec/l3_encode.cpp, codec/l3_decode.cpp): the fixed header's
// magic, flags and byte order (docs/L3_FORMAT.md section 1), shared by the writer and the reader.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "codec/l3.h"
#include "common/error.h"

namespace fid::codec::l3detail {

inline constexpr uint8_t kMagic[4] = {'F', 'I', 'L', '3'};
inline constexpr uint8_t kFlagInterPatch = kL3FlagInterPatch;
inline constexpr uint8_t kFlagHuffCodes = kL3FlagHuffCodes;
inline constexpr uint8_t kKnownFlags = kFlagInterPatch | kFlagHuffCodes;
inline constexpr size_t kCodeTableBytes = kL3CodeTableBytes;  // 16 contexts x 16 code lengths, one nibble each

inline void put_u16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t get_u16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }
inline uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

inline fid::Error invalid(std::string message) { return fid::Error{EINVAL, std::move(message)}; }

}  // namespace fid::codec::l3detail
