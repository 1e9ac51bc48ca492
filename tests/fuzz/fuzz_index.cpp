// libFuzzer target: the index loader must reject any index.sqlite content with an error, never
// crash, hang or read out of bounds; what it accepts must be consistent enough to size and name
// every file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "index/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fid-fuzz-index-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d / "records");
    return d;
  }();
  {
    FILE* f = std::fopen((dir / "index.sqlite").c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  auto store = fid::index::Store::open(dir);
  if (!store.ok()) return 0;
  for (const auto& f : (*store)->files()) {
    // Accepted pieces (stored or derived offsets) lie inside their record, after its header.
    const uint64_t record_size = (*store)->records()[f.record].size;
    for (const auto& p : (*store)->pieces(f))
      if (p.offset < 16 || p.offset > record_size || p.size > record_size - p.offset) std::abort();
    (void)(*store)->relative_path(f);
    (void)(*store)->size_at_level(f, (*store)->levels());
    (void)(*store)->storage_position(f);
  }
  for (const auto& r : (*store)->records()) (void)(*store)->record_files(r.id);
  return 0;
}
