// ASCII case folding for protocol text (hostnames, header names, setting keywords): locale-free,
// so that a server's answer or a setting never depends on the daemon's locale.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace fid {

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

// Text from outside (a name, an attribute's value) as a message shows it: bytes below 0x20 and
// 0x7f escaped as \xNN, at most `max` bytes of it, "..." after a cut.
inline std::string printable(std::string_view s, size_t max = 64) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c >= 0x20 && c != 0x7f) out += static_cast<char>(c);
    else out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
  }
  return s.size() > max ? out + "..." : out;
}

inline bool ascii_iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

}  // namespace fid
