#include "common/glob.h"

namespace fid {

// Matches a character class at pattern[pi] ('[' ...). Returns the index after ']' and sets ok.
static size_t match_class(std::string_view pat, size_t pi, char c, bool& matched, bool& valid) {
  size_t i = pi + 1;
  bool negate = false;
  if (i < pat.size() && (pat[i] == '!' || pat[i] == '^')) { negate = true; ++i; }
  bool any = false;
  bool first = true;
  while (i < pat.size() && (pat[i] != ']' || first)) {
    first = false;
    char lo = pat[i];
    char hi = lo;
    if (i + 2 < pat.size() && pat[i + 1] == '-' && pat[i + 2] != ']') {
      hi = pat[i + 2];
      i += 3;
    } else {
      ++i;
    }
    if (static_cast<unsigned char>(c) >= static_cast<unsigned char>(lo) &&
        static_cast<unsigned char>(c) <= static_cast<unsigned char>(hi))
      any = true;
  }
  if (i >= pat.size()) { valid = false; return pi + 1; }  // no closing ']': literal '['
  valid = true;
  matched = (any != negate) && c != '/';
  return i + 1;
}

static bool glob_rec(std::string_view pat, std::string_view path) {
  size_t pi = 0, si = 0;
  while (pi < pat.size()) {
    char pc = pat[pi];
    if (pc == '*') {
      bool dbl = pi + 1 < pat.size() && pat[pi + 1] == '*';
      if (dbl) {
        size_t rest = pi + 2;
        // "**/" also matches zero directories.
        if (rest < pat.size() && pat[rest] == '/') {
          if (glob_rec(pat.substr(rest + 1), path.substr(si))) return true;
        }
        for (size_t k = si; k <= path.size(); ++k)
          if (glob_rec(pat.substr(rest), path.substr(k))) return true;
        return false;
      }
      for (size_t k = si; k <= path.size(); ++k) {
        if (glob_rec(pat.substr(pi + 1), path.substr(k))) return true;
        if (k < path.size() && path[k] == '/') break;
      }
      return false;
    }
    if (si >= path.size()) return false;
    if (pc == '?') {
      if (path[si] == '/') return false;
      ++pi; ++si;
      continue;
    }
    if (pc == '[') {
      bool matched = false, valid = false;
      size_t next = match_class(pat, pi, path[si], matched, valid);
      if (valid) {
        if (!matched) return false;
        pi = next; ++si;
        continue;
      }
    }
    if (pc == '\\' && pi + 1 < pat.size()) { ++pi; pc = pat[pi]; }
    if (pc != path[si]) return false;
    ++pi; ++si;
  }
  return si == path.size();
}

bool glob_match(std::string_view pattern, std::string_view path) {
  while (!pattern.empty() && pattern.front() == '/') pattern.remove_prefix(1);
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  return glob_rec(pattern, path);
}

std::string glob_escape(std::string_view text) {
  std::string glob;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') glob += '\\';
    glob += c;
  }
  return glob;
}

}  // namespace fid
