// libFuzzer target: the index loader must reject any index.sqlite content with a StoreError,
// never crash, hang or read out of bounds.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
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
  try {
    auto store = fid::index::Store::open(dir);
    for (const auto& f : store->files()) {
      (void)store->relative_path(f);
      (void)store->size_at_level(f, store->levels());
    }
  } catch (const fid::index::StoreError&) {
  }
  return 0;
}
