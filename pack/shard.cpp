#include "pack/shard.h"

#include <xxhash.h>

#include <cstdint>
#include <fmt/format.h>
#include <memory>
#include <optional>

#include "common/numbers.h"

namespace fid::pack {

namespace {

bool parse_u32(std::string_view s, uint32_t& v) {
  const std::optional<uint64_t> n = parse_u64(s);
  if (!n || *n > UINT32_MAX) return false;
  v = static_cast<uint32_t>(*n);
  return true;
}

}  // namespace

fid::Result<Shard> parse_shard(std::string_view spec) {
  const size_t slash = spec.find('/');
  Shard s;
  if (slash == std::string_view::npos || !parse_u32(spec.substr(0, slash), s.index) ||
      !parse_u32(spec.substr(slash + 1), s.count) || s.count == 0 || s.index >= s.count)
    return fid::Error{EINVAL, fmt::format("--shard '{}': expected I/N with 0 <= I < N", spec)};
  return s;
}

std::string shard_text(const Shard& s) { return fmt::format("{}/{}", s.index, s.count); }

uint32_t shard_of(std::string_view rel, uint32_t count) {
  return static_cast<uint32_t>(XXH64(rel.data(), rel.size(), 0) % count);
}

std::string source_digest(const sources::SourceTree& tree) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> st(XXH64_createState(), &XXH64_freeState);
  XXH64_reset(st.get(), 0);
  const char nul = 0;
  for (size_t d = 1; d < tree.dirs.size(); ++d) {
    XXH64_update(st.get(), tree.dirs[d].rel.data(), tree.dirs[d].rel.size());
    XXH64_update(st.get(), &nul, 1);
  }
  for (uint32_t i = 0; i < tree.files.size(); ++i) {
    const std::string rel = tree.rel(i);
    XXH64_update(st.get(), rel.data(), rel.size());
    XXH64_update(st.get(), &nul, 1);
    uint8_t size[8];
    uint64_t v = tree.files.listed_size(i);
    for (uint8_t& b : size) {
      b = static_cast<uint8_t>(v);
      v >>= 8;
    }
    XXH64_update(st.get(), size, 8);
  }
  return fmt::format("{:016x}", XXH64_digest(st.get()));
}

}  // namespace fid::pack
