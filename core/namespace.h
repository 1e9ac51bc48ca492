// The tree a mount shows: names, inodes, attributes and listings of the store's folders and
// files (live at their current level, or under /.fidelity/sg/K at level K) and of /.fidelity.
// Inodes are InodeMap arithmetic, so nothing is allocated per lookup; every inode's content is
// immutable (a file at another level is another inode).
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "core/control_files.h"
#include "core/file_reader.h"
#include "core/inodes.h"
#include "core/level_policy.h"
#include "core/orders.h"
#include "core/display_names.h"
#include "index/store.h"

namespace fid::core {

class Namespace {
 public:
  Namespace(const index::Store& store, const InodeMap& inodes, const LevelPolicy& levels, const LevelPolicy& encodings,
            FileReader& reader, ControlFiles& control, OrderFiles& orders, const DisplayNames& display_names);

  struct DirEntry {
    std::string_view name;
    uint64_t ino = 0;
    mode_t type = 0;  // S_IFDIR or S_IFREG
  };
  // A name as the kernel is told it. ino 0: there is no such name (the kernel may remember that).
  struct Entry {
    uint64_t ino = 0;
    uint64_t generation = 1;
    struct stat attr {};
    bool name_cacheable = true;  // false: ask again at every lookup (control and order files)
  };
  // `name` in folder node `parent` with its attributes, its name marked known. `after_level_read`
  // (tests only) runs between the first reading of a live file's level and the mark.
  Result<Entry> entry(const Node& parent, std::string_view name,
                      const std::function<void(uint64_t ino)>& after_level_read = {});
  // The entry of a listed name with its attributes (a listing that fills attributes).
  Result<Entry> listed_entry(const DirEntry& d);
  // Entry i of the listing of directory `dir` ("." and ".." first); nullopt past the end.
  std::optional<DirEntry> entry_at(uint64_t dir, size_t i);
  // The inode of `name` in directory node `parent` (0: no such name) and its generation.
  uint64_t lookup(const Node& parent, std::string_view name, uint64_t* generation);
  // Attributes of ino; false if there is no such inode, or its size cannot be known (a sequential
  // level whose re-encoding failed: FileReader logged why).
  bool attributes(uint64_t ino, struct stat& st);
  // False for names whose inode changes while the name stays (control and order files): the
  // kernel must ask again at every lookup.
  static bool name_cacheable(NodeType t);
  // The inode a live file has now: at its effective level and encoding (non-JPEG files have one
  // content).
  uint64_t live_file_ino(uint32_t f) const;
  std::string_view display_name(const index::File& f) const;

  // The kernel was told the name of node n (a lookup, a listing with attributes): a level change
  // then has to invalidate it.
  void note_known(const Node& n);
  // The kernel was told a name of live file `file`, at any level (a level change invalidates it).
  bool is_known(uint32_t file) const;
  // ... at the level and encoding it has now: the kernel holds its live inode.
  bool knows_live(uint32_t file) const;
  // Called by a level change between setting the level and reading is_known; note_known does
  // the same between its mark and the lookup's reading of the level. Both are read-modify-writes
  // of one atomic, so the later of the two acquires the earlier's writes: of a lookup and a
  // change, one sees the other's (the mark, or the new level). (ThreadSanitizer models this;
  // it does not model fences.)
  void order_with_lookups() const { order_point_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::optional<DirEntry> tree_entry(const Node& n, size_t i) const;
  std::optional<DirEntry> control_entry(const Node& n, size_t i);
  uint64_t lookup_in_tree(const Node& n, std::string_view name) const;
  // The file named `name` among folder d's files (its display name), or nullopt.
  std::optional<uint32_t> find_file(const index::Dir& d, std::string_view name) const;
  bool stat_tree(const Node& n, struct stat& st);
  bool stat_control(const Node& n, struct stat& st);

  const index::Store& store_;
  const InodeMap& inodes_;
  const LevelPolicy& levels_;
  const LevelPolicy& encodings_;
  FileReader& reader_;
  ControlFiles& control_;
  OrderFiles& orders_;
  const DisplayNames& display_names_;
  const uid_t uid_;
  const gid_t gid_;
  // The inode of each file the kernel was told last (its level, and kSequentialTag), or 0: a level
  // change makes new inodes, and the kernel knows the new one only once told.
  static constexpr uint8_t kSequentialTag = 128;
  static uint8_t known_tag(int level, bool sequential) {
    return static_cast<uint8_t>(level + 1) | (sequential ? kSequentialTag : uint8_t{0});
  }
  std::unique_ptr<std::atomic<uint8_t>[]> known_;  // by file
  mutable std::atomic<uint64_t> order_point_{0};
};

}  // namespace fid::core
