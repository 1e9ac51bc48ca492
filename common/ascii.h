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

inline bool ascii_iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

}  // namespace fid
