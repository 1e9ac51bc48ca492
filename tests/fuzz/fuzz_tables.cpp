// libFuzzer target: a mount maps a tables file (docs/FORMAT.md "The tables cache") and trusts
// what it accepts. Each input edits a valid tables file, made from the store scripts/test.sh packs
// ($FIDELITYFS_FUZZ_STORE; without it every input is ignored), and then sets its identity fields
// and both hashes as a writer would, so that mutation reaches the rows behind the checksums:
// the file must be refused with an error, or be consistent enough to size and name every file.
// An input is a list of edits: op (1 byte), offset (3 bytes, modulo the file's length), n (1 byte),
// then for op 0 n bytes written at the offset, for op 1 the file cut at the offset, for op 2 n
// zero bytes appended.
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "index/store.h"
#include "index/tables_file.h"

namespace {

namespace fs = std::filesystem;

// Offsets of docs/FORMAT.md's header table.
constexpr size_t kPathBytesAt = 36, kIdentityAt = 48, kIdentityBytes = 40, kBodyHashAt = 256, kHeaderHashAt = 264,
                 kHeaderBytes = 272;

struct Base {
  fs::path store, tables_dir, file;
  fid::index::IndexIdentity identity;
  std::vector<uint8_t> bytes;
};

const Base* make_base() {
  const char* store = std::getenv("FIDELITYFS_FUZZ_STORE");
  if (!store || !*store) return nullptr;
  auto* b = new Base;
  b->store = store;
  b->tables_dir = fs::temp_directory_path() / ("fid-fuzz-tables-" + std::to_string(::getpid()));
  fs::create_directories(b->tables_dir);
  ::chmod(b->tables_dir.c_str(), 0700);  // a tables folder must be private
  auto opened = fid::index::Store::open(b->store, b->tables_dir);
  auto identity = fid::index::identify_index(b->store / "index.sqlite");
  if (!opened.ok() || !identity.ok() || (*opened)->tables_file().empty()) std::abort();  // the packed store must map
  b->identity = *identity;
  b->file = (*opened)->tables_file();
  std::ifstream in(b->file, std::ios::binary);
  b->bytes.assign(std::istreambuf_iterator<char>(in), {});
  if (b->bytes.size() < kHeaderBytes) std::abort();
  return b;
}

void put_u64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) {
  if (at + 8 <= bytes.size()) std::memcpy(bytes.data() + at, &v, 8);
}

// What a writer sets last: the identity of the index, then the body hash and the header hash.
void seal(std::vector<uint8_t>& bytes, const std::vector<uint8_t>& base) {
  if (bytes.size() < kHeaderBytes) return;
  std::memcpy(bytes.data() + kIdentityAt, base.data() + kIdentityAt, kIdentityBytes);
  uint32_t path_bytes = 0;
  std::memcpy(&path_bytes, bytes.data() + kPathBytesAt, 4);
  const uint64_t path_end = kHeaderBytes + static_cast<uint64_t>(path_bytes);
  if (path_end > bytes.size()) return;
  put_u64(bytes, kBodyHashAt, XXH3_64bits(bytes.data() + path_end, bytes.size() - path_end));
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, bytes.data(), kHeaderHashAt);
  XXH3_64bits_update(st, bytes.data() + kHeaderBytes, path_bytes);
  put_u64(bytes, kHeaderHashAt, XXH3_64bits_digest(st));
  XXH3_freeState(st);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Base* base = make_base();
  if (!base) return 0;
  std::vector<uint8_t> bytes = base->bytes;
  for (size_t i = 0; i + 5 <= size && !bytes.empty();) {
    const uint8_t op = data[i] % 3, n = data[i + 4];
    const size_t at = (data[i + 1] | data[i + 2] << 8 | data[i + 3] << 16) % bytes.size();
    i += 5;
    if (op == 0) {
      for (size_t k = 0; k < n && i < size && at + k < bytes.size(); ++k) bytes[at + k] = data[i++];
    } else if (op == 1) {
      bytes.resize(at);
    } else {
      bytes.resize(bytes.size() + n);
    }
  }
  seal(bytes, base->bytes);
  {
    std::ofstream out(base->file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  // Mapped directly first: a refused file would send Store::open back to the index, which is slow.
  if (!fid::index::MappedTables::map(base->file, base->identity).ok()) return 0;
  auto store = fid::index::Store::open(base->store, base->tables_dir);
  if (!store.ok() || (*store)->tables_file().empty()) std::abort();  // it mapped just now
  const fid::index::Store& s = **store;
  for (const auto& f : s.files()) {
    const uint64_t record_size = s.records()[f.record].size;
    for (const auto& p : s.pieces(f))
      if (p.offset < 16 || p.offset > record_size || p.size > record_size - p.offset) std::abort();
    (void)s.relative_path(f);
    (void)s.size_at_level(f, s.levels());
    (void)s.storage_position(f);
  }
  for (const auto& d : s.dirs()) {
    for (uint32_t c : s.child_dirs().subspan(d.subdir_begin, d.subdir_count)) (void)s.name(s.dirs()[c]);
    for (uint32_t c : s.child_files().subspan(d.file_begin, d.file_count)) (void)s.name(s.files()[c]);
  }
  for (const auto& r : s.records()) (void)s.record_files(r.id);
  return 0;
}
