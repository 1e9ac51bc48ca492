// Files for unit tests: a fresh temporary folder per test, byte flips in store files, and the
// test data folder that scripts/test.sh makes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fid::testutil {

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("fid-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;  // inline: one counter across the test binary's files
  std::filesystem::path path_;
};

// $FIDELITYFS_TEST_DATA/sub: scripts/test.sh makes "edge" (the edge zoo of
// tests/fixtures/make_tree.py, with MANIFEST.tsv) and "fhd" (three 1920x1080 PNGs, real photos
// when the shared datasets are there). Empty when unset or missing: the test then skips.
inline std::filesystem::path test_data(const char* sub) {
  const char* root = std::getenv("FIDELITYFS_TEST_DATA");
  if (!root || !*root) return {};
  std::filesystem::path p = std::filesystem::path(root) / sub;
  return std::filesystem::is_directory(p) ? p : std::filesystem::path();
}

// XORs the byte at `offset` of an existing file with `mask` (damage that checksums must catch).
inline void flip_byte(const std::filesystem::path& file, uint64_t offset, uint8_t mask = 0x01) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(offset);
  f.seekg(at);
  char c = 0;
  f.get(c);
  f.seekp(at);
  f.put(static_cast<char>(c ^ static_cast<char>(mask)));
}

}  // namespace fid::testutil
