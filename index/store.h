// Read side of a store: index.sqlite loaded once into compact in-memory tables, and record
// files read by piece with checksum verification. No FUSE here; no SQLite after open().
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fid::index {

inline constexpr int kFormatVersion = 1;

enum class FileKind : uint8_t { jpeg = 0, l3 = 1, blob = 2 };
std::string_view kind_name(FileKind k);

// The bytes of a file at level k (docs/FORMAT.md "Reading a file at a level"): its first
// pieces_at_level(kind, k, L) pieces in order, then level_trailer(kind) (a JPEG's EOI marker).
// The mount, verify, the fuzzers and the packer's sizes all use these two definitions.
uint32_t pieces_at_level(FileKind kind, int level, int levels);
std::span<const uint8_t> level_trailer(FileKind kind);

// One stored byte range of a file inside a record file.
struct Piece {
  uint64_t offset = 0;    // absolute offset in the record file
  uint32_t size = 0;
  uint32_t checksum = 0;  // low 32 bits of XXH3-64 of the bytes
};

struct File {
  uint32_t id = 0;           // index into Store::files()
  uint32_t dir = 0;          // parent directory id
  uint32_t name_off = 0, name_len = 0;  // into the name pool
  FileKind kind = FileKind::blob;
  uint32_t script = 0;       // jpeg: codec::ScanScript; l3: codec::shape_code (mode, palette)
  uint32_t record = 0;
  uint32_t slot = 0;         // position of the file inside its record (storage order)
  uint32_t first_piece = 0;  // jpeg: levels()+1 pieces (header, level 1..L); others: 1 piece
  uint32_t piece_count = 0;
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;      // source mtime
};

struct Dir {
  uint32_t id = 0;
  uint32_t parent = 0;       // root's parent is itself (0)
  uint32_t name_off = 0, name_len = 0;
  // Children, sorted by name (bytewise): sub-directories first in `subdirs`, files in `files`.
  uint32_t subdir_begin = 0, subdir_count = 0;  // into Store::child_dirs()
  uint32_t file_begin = 0, file_count = 0;      // into Store::child_files()
  int64_t mtime_ns = 0;
};

struct Record {
  uint32_t id = 0;
  std::string path;          // relative to the store, e.g. records/000012.rec
  uint64_t size = 0;
  uint8_t layout = 0;        // 0 = scan (PCR level-major), 1 = whole (files concatenated)
  std::vector<uint64_t> region_end;  // scan: end offset of region 0 (headers), 1..L; whole: 1 entry
};

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Store {
 public:
  // Loads STORE_DIR/index.sqlite, checks the format version and opens every record file.
  // Throws StoreError with a one-line reason naming the file.
  static std::unique_ptr<Store> open(const std::filesystem::path& dir);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  int levels() const { return levels_; }
  uint64_t seed() const { return seed_; }

  std::span<const File> files() const { return files_; }
  std::span<const Dir> dirs() const { return dirs_; }
  std::span<const Record> records() const { return records_; }
  std::span<const uint32_t> child_dirs() const { return child_dirs_; }
  std::span<const uint32_t> child_files() const { return child_files_; }
  std::string_view name(const File& f) const { return {names_.data() + f.name_off, f.name_len}; }
  std::string_view name(const Dir& d) const { return {names_.data() + d.name_off, d.name_len}; }
  std::span<const Piece> pieces(const File& f) const { return {pieces_.data() + f.first_piece, f.piece_count}; }

  // Path relative to the store root ("cls/img.jpg"); for messages and order files.
  std::string relative_path(const File& f) const;
  std::string relative_path(const Dir& d) const;

  // Number of pieces a read at `level` covers (jpeg: 1 + level, clamped to levels(); else 1)
  // and whether the EOI trailer follows them.
  uint32_t pieces_at_level(const File& f, int level) const;
  // Bytes a read of the file at `level` returns (jpeg: pieces + 2-byte EOI; others: the piece).
  uint64_t size_at_level(const File& f, int level) const;

  // Reads a whole piece into dst (dst.size() == piece.size) and verifies its checksum.
  // Returns 0, or -EIO on short read / checksum mismatch, or -errno of pread.
  int read_piece(const File& f, uint32_t piece_index, std::span<uint8_t> dst) const;
  // The file descriptor of a record (for splice/prefetch in the fs layer).
  int record_fd(uint32_t record) const { return record_fds_[record]; }
  // Records that could not be opened or are damaged (their files read as EIO), one line each.
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  Store() = default;
  std::filesystem::path dir_;
  int levels_ = 0;
  uint64_t seed_ = 0;
  std::vector<File> files_;
  std::vector<Dir> dirs_;
  std::vector<Record> records_;
  std::vector<uint32_t> child_dirs_, child_files_;
  std::vector<Piece> pieces_;
  std::string names_;
  std::vector<int> record_fds_;
  std::vector<std::string> problems_;
};

// Checksum used for every piece: low 32 bits of XXH3-64.
uint32_t piece_checksum(std::span<const uint8_t> bytes);

}  // namespace fid::index
