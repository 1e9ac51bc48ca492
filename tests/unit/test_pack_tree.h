// A small source tree of blobs (two classes, an empty folder, a name that is not UTF-8), packed
// with the scan layout into small records, and how tests open the store and read its files: the
// helpers of the tests of the store, the packer and the published orders.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/read_range.h"
#include "index/store.h"
#include "pack/packer.h"
#include "storage/local_record_source.h"
#include "test_result.h"

namespace fid::testutil {

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A source tree of blobs in two classes plus an empty folder and a name that is not UTF-8.
inline std::map<std::string, std::string> make_tree(const std::filesystem::path& src) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 40; ++i) {
    std::string rel = (i % 2 ? "cat/" : "dog/") + std::to_string(i) + ".bin";
    files[rel] = random_bytes(static_cast<size_t>(100 + i * 997), static_cast<uint32_t>(i));
  }
  files["dog/\xff\xfe-latin1.txt"] = "not utf-8 name";
  files["empty.txt"] = "";
  for (auto& [rel, bytes] : files) write_file(src / rel, bytes);
  std::filesystem::create_directories(src / "empty_class");
  return files;
}

inline fid::pack::PackOptions pack_options(const std::filesystem::path& src, const std::filesystem::path& store, uint64_t record_bytes = 8192) {
  fid::pack::PackOptions opt;
  opt.sources = {src};
  opt.store = store;
  opt.jobs = 2;
  opt.record_bytes = record_bytes;
  // The scan layout: these tests rewrite stores as formats 1 and 2, which had no other.
  opt.layout = fid::index::StoreLayout::scan;
  return opt;
}

inline fid::Result<fid::pack::PackReport> try_pack(const std::filesystem::path& src, const std::filesystem::path& store) {
  std::atomic<bool> cancel{false};
  return fid::pack::pack(pack_options(src, store), nullptr, cancel);
}

// A pack that must succeed (a failure ends the test).
inline fid::pack::PackReport pack(const std::filesystem::path& src, const std::filesystem::path& store, uint64_t record_bytes = 8192) {
  std::atomic<bool> cancel{false};
  return fid::testutil::value_or_throw(fid::pack::pack(pack_options(src, store, record_bytes), nullptr, cancel));
}

inline std::unique_ptr<index::Store> open_store(const std::filesystem::path& dir) {
  auto s = index::Store::open(dir);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(s).value() : nullptr;
}

// The error message of opening `dir`, which must fail.
inline std::string open_error(const std::filesystem::path& dir) {
  auto s = index::Store::open(dir);
  if (s.ok()) {
    ADD_FAILURE() << "opened " << dir;
    return {};
  }
  return s.error().message;
}

// A file's bytes as the mount reads them (its one piece: these are blobs); *rc: 0 or -errno.
inline std::string read_file(const index::Store& s, const fid::index::File& f, int* rc = nullptr) {
  fid::storage::LocalRecordSource source(s);
  fid::core::StoredPieces pieces(s, source);
  std::vector<uint8_t> out;
  fid::Status st = fid::core::read_range(s, f, 1, 0, UINT64_MAX, pieces, out);
  if (rc) *rc = st.ok() ? 0 : -st.error().code;
  return std::string(out.begin(), out.end());
}

}  // namespace fid::testutil
