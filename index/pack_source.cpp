#include "index/pack_source.h"

#include <algorithm>

namespace fid::index {

bool walk_less(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const auto ca = a[i] == '/' ? 0 : static_cast<unsigned char>(a[i]) + 1;
    const auto cb = b[i] == '/' ? 0 : static_cast<unsigned char>(b[i]) + 1;
    return ca < cb;
  }
  return a.size() < b.size();
}

void SourceFiles::add(uint32_t dir, std::string_view name, uint32_t size) {
  const size_t need = 10 + name.size();
  if (chunks_.empty() || chunks_.back().size() + need > kChunkBytes) {
    chunks_.emplace_back();
    chunks_.back().reserve(kChunkBytes);
  }
  std::string& c = chunks_.back();
  entry_.push_back((static_cast<uint64_t>(chunks_.size() - 1) << kChunkBits) | c.size());
  char head[10];
  std::memcpy(head, &dir, 4);
  std::memcpy(head + 4, &size, 4);
  const auto len = static_cast<uint16_t>(name.size());
  std::memcpy(head + 8, &len, 2);
  c.append(head, 10);
  c.append(name);
}

}  // namespace fid::index
