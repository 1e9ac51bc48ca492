// Globs of relative paths (the config file's rules, `pack --clips`): * and ? stay inside one
// path segment, ** crosses segments ("**/" also matches no folder), [abc] / [a-z] / [!a]
// character classes, a backslash makes the next character literal.
#pragma once

#include <string>
#include <string_view>

namespace fid {

// Glob match of a '/'-separated relative path; leading slashes of either are ignored.
bool glob_match(std::string_view pattern, std::string_view path);

// `text` as a glob matching exactly itself: the metacharacters * ? [ ] and \ escaped.
std::string glob_escape(std::string_view text);

}  // namespace fid
