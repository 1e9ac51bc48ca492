// ASCII case folding for protocol text (hostnames, header names, config keys): locale-free, so
// that a server's answer never depends on the daemon's locale.
#pragma once

#include <string>
#include <string_view>

namespace fid {

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

}  // namespace fid
