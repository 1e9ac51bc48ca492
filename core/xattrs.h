// The extended attributes under user.fidelity.*: a file's or folder's level (scan_group),
// encoding (progressive or sequential) and clip reads (on or off), the three that can be set;
// the order seed on the root (order_seed, settable); read-only facts about a file (kind, levels,
// bytes per level, record, storage position, source size, L3 view format); read-only facts
// about a clip folder made from a video (its name, bytes, codec, frame rate and size, frames).
// Any other attribute cannot be stored on a read-only tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "core/file_reader.h"
#include "core/inodes.h"
#include "core/level_changes.h"
#include "core/level_policy.h"
#include "core/orders.h"
#include "core/random_reads.h"
#include "index/store.h"

namespace fid::core {

class Xattrs {
 public:
  // A level or order seed set here is handed to `random_reads`, which depends on both.
  Xattrs(const index::Store& store, const LevelPolicy& levels, const LevelPolicy& encodings,
         const LevelPolicy& clip_reads, const FileReader& reader, OrderFiles& orders, LevelChanges& changes,
         RandomReads& random_reads);

  // Whether `name` is one of ours (user.fidelity.*).
  static bool is_ours(std::string_view name);

  // The value of attribute `name` of node n. ENODATA if n has no such attribute.
  Result<std::string> get(const Node& n, std::string_view name) const;
  // The names of n's attributes, each followed by a NUL (listxattr's format).
  std::string list(const Node& n) const;
  // XATTR_CREATE / XATTR_REPLACE in `flags`. EINVAL (bad value), EPERM (read-only attribute or
  // a node without levels), EEXIST, ENODATA, EROFS (any other attribute).
  Status set(const Node& n, std::string_view name, std::string_view value, int flags);
  Status remove(const Node& n, std::string_view name);
  // The result of a set or remove, its Error marked info when someone asked for a change that
  // failed for a reason they want to know (not EPERM, EROFS or EIO).
  static Status answered(Status st);

 private:
  std::optional<std::string> file_value(const index::File& f, int view, std::string_view key) const;
  // A fact of the video clip folder `dir` was made from; nullopt for any other folder.
  std::optional<std::string> video_value(uint32_t dir, std::string_view key) const;
  Status set_seed(std::string_view value, int flags);
  Status change(const Node& n, std::string_view name, std::string_view value, int flags);
  Status remove_change(const Node& n, std::string_view name);
  void seed_changed();
  // `st`: the result of a level change, returned; a change that happened is decided on.
  Status level_changed(Status st);

  const index::Store& store_;
  const LevelPolicy& levels_;
  const LevelPolicy& encodings_;
  const LevelPolicy& clip_reads_;
  const FileReader& reader_;
  OrderFiles& orders_;
  LevelChanges& changes_;
  RandomReads& random_reads_;
};

}  // namespace fid::core
