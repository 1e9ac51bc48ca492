// Whole numbers read from text that strangers write (command lines, config files, a store's
// meta): decimal digits only, the whole text, no sign, no wrap-around, no clamping.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fid {

// "0" .. "18446744073709551615"; nullopt for anything else (empty, a sign, spaces, overflow).
inline std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace fid
