// libFuzzer target: the index loader must reject any index.sqlite content with an error, never
// crash, hang or read out of bounds; what it accepts must be consistent enough to size and name
// every file. An input that starts with "SQL:" is statements run on a copy of a valid index
// ($FIDELITYFS_FUZZ_INDEX_BASE; scripts/test.sh packs one) before it is opened, so that mutation
// reaches the schema (views, triggers, dropped, renamed or retyped columns, hostile rows), which
// mutated bytes rarely do.
#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "index/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fid-fuzz-index-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d / "records");
    return d;
  }();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.starts_with("SQL:")) {
    const char* base = std::getenv("FIDELITYFS_FUZZ_INDEX_BASE");
    std::error_code ec;
    if (!base || !std::filesystem::copy_file(base, dir / "index.sqlite", std::filesystem::copy_options::overwrite_existing, ec))
      return 0;
    sqlite3* db = nullptr;
    if (sqlite3_open((dir / "index.sqlite").c_str(), &db) == SQLITE_OK) {
      int steps = 0;  // the statements themselves may never end (a recursive query): cut them
      sqlite3_progress_handler(db, 1000, [](void* n) { return ++*static_cast<int*>(n) > 10000 ? 1 : 0; }, &steps);
      const std::string sql(input.substr(4));
      (void)sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
    }
    sqlite3_close(db);
  } else {
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
  // Accepted clip runs lie inside their record's slots, and their level ends inside the record.
  for (const auto& c : (*store)->clip_runs()) {
    const size_t slots = (*store)->record_files(c.record).size();
    if (c.frames == 0 || c.first_slot > slots || c.frames > slots - c.first_slot) std::abort();
    for (uint64_t end : c.level_end)
      if (end > (*store)->records()[c.record].size) std::abort();
  }
  return 0;
}
