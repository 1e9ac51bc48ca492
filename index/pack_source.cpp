#include "index/pack_source.h"

namespace fid::index {

void SourceFiles::add(uint32_t dir, std::string_view name) {
  const size_t need = 6 + name.size();
  if (chunks_.empty() || chunks_.back().size() + need > kChunkBytes) {
    chunks_.emplace_back();
    chunks_.back().reserve(kChunkBytes);
  }
  std::string& c = chunks_.back();
  entry_.push_back((static_cast<uint64_t>(chunks_.size() - 1) << kChunkBits) | c.size());
  char head[6];
  std::memcpy(head, &dir, 4);
  const auto len = static_cast<uint16_t>(name.size());
  std::memcpy(head + 4, &len, 2);
  c.append(head, 6);
  c.append(name);
}

}  // namespace fid::index
