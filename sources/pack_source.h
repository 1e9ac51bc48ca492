// What pack reads: a source lists its files once (the tree) and then reads any file by its index,
// from any thread. The folder source is the first kind; others (tars, object stores) plug in here.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/error.h"
#include "index/store.h"

namespace fid::sources {

inline constexpr uint32_t kNotAFrame = UINT32_MAX;
inline constexpr uint64_t kMaxSourceFileBytes = 0xFFFFFFFFull;  // a piece size is a u32

struct SourceDir {
  uint32_t parent = 0;
  std::string name;  // raw bytes
  std::string rel;   // relative path, for messages
  int64_t mtime_ns = 0;
};

// Byte strings appended to fixed-size chunks, each found again by the handle add() returned:
// growing the pool never copies (nor doubles) what it holds, and an entry costs its bytes plus
// the caller's 8-byte handle. Listings of millions of names live here. Chunks are mapped
// memory of their own, so a released chunk goes back to the system at once (freed heap memory
// would stay resident while a tree is built from a listing).
class ChunkedPool {
 public:
  static constexpr int kChunkBits = 16;  // small enough that a drained listing gives chunks back soon
  static constexpr size_t kMaxEntryBytes = size_t{1} << kChunkBits;
  ChunkedPool() = default;
  ChunkedPool(ChunkedPool&&) noexcept = default;
  ChunkedPool& operator=(ChunkedPool&&) noexcept = default;
  // Not copied: a copy would map chunks, which can fail, and no listing needs one.
  ChunkedPool(const ChunkedPool&) = delete;
  ChunkedPool& operator=(const ChunkedPool&) = delete;
  // The parts, stored one after the other, are at most kMaxEntryBytes long together. The
  // entry's handle; ENOMEM (or mmap's errno) when no memory can be mapped, the message the
  // reason only.
  fid::Result<uint64_t> add(std::initializer_list<std::string_view> parts);
  const char* at(uint64_t handle) const {
    return chunks_[chunk_of(handle)].get() + (handle & (kMaxEntryBytes - 1));
  }
  static size_t chunk_of(uint64_t handle) { return static_cast<size_t>(handle >> kChunkBits); }
  size_t chunks() const { return chunks_.size(); }
  // Gives chunk c's memory back; its handles must not be used again.
  void release(size_t c) { chunks_[c].reset(); }

 private:
  struct Unmap {
    void operator()(char* p) const;
  };
  // A new chunk, or nullptr with errno set.
  static char* map_chunk();
  std::vector<std::unique_ptr<char, Unmap>> chunks_;
  size_t used_ = 0;  // bytes used in the last chunk
};

// The listed files, a few dozen bytes each so that ten million fit in a few hundred MiB: file i
// is an entry of the pool: u32 folder id, u32 size when listed, u16 name length, the name's bytes.
class SourceFiles {
 public:
  uint32_t size() const { return static_cast<uint32_t>(entry_.size()); }
  // ENOMEM when the pool cannot grow (the message the reason only).
  fid::Status add(uint32_t dir, std::string_view name, uint32_t size);
  uint32_t dir(uint32_t i) const { return u32_at(i, 0); }
  uint32_t listed_size(uint32_t i) const { return u32_at(i, 4); }
  std::string_view name(uint32_t i) const {
    const char* e = pool_.at(entry_[i]);
    uint16_t len;
    std::memcpy(&len, e + 8, 2);
    return {e + 10, len};
  }

 private:
  uint32_t u32_at(uint32_t i, int offset) const {
    uint32_t v;
    std::memcpy(&v, pool_.at(entry_[i]) + offset, 4);
    return v;
  }
  std::vector<uint64_t> entry_;
  ChunkedPool pool_;
};

// Relative paths in the order of a depth-first walk whose children are sorted bytewise: '/'
// compares below every other byte, so a folder's contents directly follow it. The order of file
// ids in a store (and of a source's listing).
bool walk_less(std::string_view a, std::string_view b);

// Listed paths kept compact until they are sorted into a tree, so that ten million fit: each
// is one pool entry, the caller's fixed-size Info (trivially copyable), then u16 path length,
// u16 extra length, the path, and an extra string (a key, a link's target, a reason; often
// empty). Costs sizeof(Info) + 12 bytes + the strings a path.
template <class Info>
class PathListing {
 public:
  static_assert(std::is_trivially_copyable_v<Info>);
  static constexpr size_t kMaxBytes = 4096;  // PATH_MAX, for the path and for the extra
  struct Entry {
    Info info;
    std::string_view path, extra;
  };

  // Nothing added: ENAMETOOLONG when the path or the extra is longer than kMaxBytes, ENOMEM when
  // the pool cannot grow. The message is the reason only ("a path longer than 4096 bytes").
  fid::Status add(const Info& info, std::string_view path, std::string_view extra = {}) {
    if (path.size() > kMaxBytes || extra.size() > kMaxBytes)
      return fid::Error{ENAMETOOLONG, "a path longer than " + std::to_string(kMaxBytes) + " bytes"};
    char head[sizeof(Info) + 4];
    std::memcpy(head, &info, sizeof(Info));
    const auto path_len = static_cast<uint16_t>(path.size()), extra_len = static_cast<uint16_t>(extra.size());
    std::memcpy(head + sizeof(Info), &path_len, 2);
    std::memcpy(head + sizeof(Info) + 2, &extra_len, 2);
    fid::Result<uint64_t> handle = pool_.add({std::string_view(head, sizeof head), path, extra});
    if (!handle) return std::move(handle).error();
    entries_.push_back(*handle);
    return {};
  }
  size_t size() const { return entries_.size(); }
  Entry operator[](size_t k) const { return entry_at(entries_[k]); }
  // Walk order of the paths (walk_less), listing order among equal paths.
  void sort() {
    // Handles grow in listing order: ties broken by them keep the sort stable without the
    // buffer std::stable_sort takes.
    std::sort(entries_.begin(), entries_.end(), [this](uint64_t a, uint64_t b) {
      const std::string_view pa = path_at(pool_.at(a)), pb = path_at(pool_.at(b));
      return pa == pb ? a < b : walk_less(pa, pb);
    });
  }
  // After sort(): calls fn(entry) for every entry in order until one returns an error, giving
  // each pool chunk back once its last entry has been passed, and leaves the listing empty. A
  // tree built from a listing thus grows as the listing shrinks. Listings usually come near
  // walk order (S3 keys are sorted bytewise, nginx sorts each folder's listing, a tar holds a
  // folder's members together), so chunks go back early.
  template <class Fn>
  fid::Status drain(Fn&& fn) {
    std::vector<uint32_t> left(pool_.chunks());
    for (uint64_t e : entries_) ++left[ChunkedPool::chunk_of(e)];
    fid::Status status;
    for (uint64_t e : entries_) {
      if (!(status = fn(entry_at(e)))) break;
      if (--left[ChunkedPool::chunk_of(e)] == 0) pool_.release(ChunkedPool::chunk_of(e));
    }
    entries_ = {};
    pool_ = {};
    return status;
  }
  // After sort(): the first entry whose path is not before `path` in walk order.
  size_t lower_bound(std::string_view path) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), path,
                               [this](uint64_t e, std::string_view p) { return walk_less(path_at(pool_.at(e)), p); });
    return static_cast<size_t>(it - entries_.begin());
  }

 private:
  Entry entry_at(uint64_t handle) const {
    const char* e = pool_.at(handle);
    Entry out;
    std::memcpy(&out.info, e, sizeof(Info));
    out.path = path_at(e);
    out.extra = {out.path.data() + out.path.size(), u16_at(e + sizeof(Info) + 2)};
    return out;
  }
  static uint16_t u16_at(const char* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  static std::string_view path_at(const char* e) { return {e + sizeof(Info) + 4, u16_at(e + sizeof(Info))}; }

  ChunkedPool pool_;
  std::vector<uint64_t> entries_;  // pool handles, in listing order until sort()
};

// A source's folders and files in the store's order: depth-first, children sorted bytewise, so
// that a parent's id is always smaller than its children's. Folder 0 is the root.
struct SourceTree {
  std::vector<SourceDir> dirs;
  SourceFiles files;
  uint64_t bytes = 0;  // the files' sizes when listed (progress)
  std::vector<std::pair<std::string, std::string>> skipped;  // path, why it is not in the store
  std::vector<index::VideoSource> videos;  // folders made from videos (--video-frames), by dir
  // --video-streams: by file, its place in its GOP (index::File::script), or kNotAFrame; empty
  // when no video is kept as a stream.
  std::vector<uint32_t> frame_place;

  std::string rel(uint32_t i) const {
    const std::string& d = dirs[files.dir(i)].rel;
    std::string_view n = files.name(i);
    return d.empty() ? std::string(n) : d + "/" + std::string(n);
  }
};

// A listed path made relative to the tree: "./" and "." segments and repeated slashes dropped;
// absolute paths, ".." and NUL bytes refused (a pack must not name anything outside its tree).
// "" is the root. The error's message is the reason only.
fid::Result<std::string> normalize_source_path(std::string_view raw);

// Builds a SourceTree from the paths of a listing (normalized) met in walk order (walk_less):
// folders are made as paths need them, ".fidelity" at the root is reserved, files over 4 GiB
// and names over 255 bytes are skipped with the reason, and a path met twice (unless both times
// as a folder) or both as a file and as a folder is refused (EEXIST; the message is the reason,
// the caller names where). Folders made for a path take `made_mtime_ns`.
class SourceTreeBuilder {
 public:
  explicit SourceTreeBuilder(int64_t root_mtime_ns);
  // A folder ("" is the root) and its mtime.
  fid::Status add_dir(const std::string& path, int64_t mtime_ns, int64_t made_mtime_ns);
  // A file: true when it is in the tree (its index is the tree's files.size() - 1), false when
  // it is skipped (listed in the tree's skipped with the reason).
  fid::Result<bool> add_file(const std::string& path, uint64_t size, int64_t made_mtime_ns);
  // An entry that cannot be packed, with the reason; the folders above it are made all the same.
  fid::Status add_skipped(const std::string& path, std::string why, int64_t made_mtime_ns);
  SourceTree take() { return std::move(tree_); }

 private:
  // The checks every path goes through; false when the path is the root or reserved.
  fid::Result<bool> admit(const std::string& path, bool is_dir);
  // Makes `dir` (and the folders above it) the current folder.
  fid::Status enter(const std::string& dir, int64_t made_mtime_ns);

  SourceTree tree_;
  std::vector<uint32_t> stack_;  // folder ids from the root to the current folder
  std::string last_path_, last_file_;
  bool last_was_dir_ = false, any_ = false, reserved_reported_ = false;
};

// One file's bytes as pack read them.
struct SourceBytes {
  std::vector<uint8_t> bytes;
  int64_t mtime_ns = 0;
};

class PackSource {
 public:
  virtual ~PackSource() = default;
  // Lists the source. Files that cannot be packed go to tree.skipped with the reason; an error
  // here (the source itself unreadable) fails the pack.
  virtual fid::Result<SourceTree> list(const std::atomic<bool>& cancel) = 0;
  // Reads file `i` of the listed tree; called from several threads at once. The error's message
  // is the reason only (the caller names the file), unless read_errors_fail().
  virtual fid::Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const = 0;
  // A source read at random returns nullopt, and pack reads it in the seeded storage order. A
  // streamed source returns the only order it can be read in (file indexes of the tree); pack
  // then calls read() in exactly that order, one call at a time, and stores files in it.
  virtual std::optional<std::vector<uint32_t>> stream_order() const { return std::nullopt; }
  // Pack reads only the files marked here (a shard's, by file index), before its first read();
  // a streamed source then skips the others' bytes instead of queueing them.
  virtual void read_only(std::vector<bool> files) { (void)files; }
  // The order in which pack will call read() (file indexes), told once before the first read()
  // of a source read at random: a remote source fetches ahead in it. Reads then come from
  // several threads, roughly (not exactly) in this order.
  virtual void will_read(const std::vector<uint32_t>& order) { (void)order; }
  // The path of file `i` when it is a local file that a reader may open itself (a video is read
  // a little at a time, never whole); empty when the source has none.
  virtual std::string local_path(const SourceTree& tree, uint32_t i) const {
    (void)tree, (void)i;
    return {};
  }
  // True when a file that cannot be read fails the pack: a remote source's reads fail for the
  // storage's reasons (gone since listed, denied, unreachable), and a store silently without
  // those files would be wrong. False: the file is skipped with the reason, as a local file
  // removed or unreadable since it was listed is. Such a source's read errors name the object
  // (its URL: the relative path alone does not say where it is), and pack reports them as they are.
  virtual bool read_errors_fail() const { return false; }
};

}  // namespace fid::sources
