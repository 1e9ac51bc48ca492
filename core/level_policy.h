// Fidelity policy: the effective level of every file, from (most specific first)
//   file xattr > nearest ancestor directory xattr > config per-path rule > mount option > config
//   default (the last two are merged into one `mount_default` by config::merge).
// Overrides live in memory only (they are lost at unmount). The class itself takes the tree
// shape as parent arrays so that it is unit-testable without a store; make_level_policy builds
// one from a store.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "index/store.h"

namespace fid::core {

class LevelPolicy {
 public:
  // levels: L of the store. mount_default: 1..L. dir_parent[d]: parent of dir d (root 0 is its
  // own parent). file_dir[f]: dir of file f. file_rule[f]: level from the config rules, 0 = none.
  LevelPolicy(int levels, int mount_default, std::vector<uint32_t> dir_parent, std::vector<uint32_t> file_dir,
              std::vector<uint8_t> file_rule);

  int levels() const { return levels_; }
  int mount_default() const { return mount_default_; }

  // Effective level of file f (1..L).
  int effective(uint32_t f) const;
  // Level without any xattr override: config rule, else the mount default.
  int base(uint32_t f) const { return f < file_rule_.size() && file_rule_[f] != 0 ? file_rule_[f] : mount_default_; }
  // Level a directory hands to its subtree from xattrs (its own or the nearest ancestor's),
  // else the mount default. Rules are per file and not reflected here.
  int dir_effective(uint32_t d) const;

  std::optional<int> file_override(uint32_t f) const;
  std::optional<int> dir_override(uint32_t d) const;
  // level 1..L sets, nullopt removes. Return false if there was nothing to remove / level bad.
  bool set_file(uint32_t f, std::optional<int> level);
  bool set_dir(uint32_t d, std::optional<int> level);

  // True if `d` is `ancestor` or below it.
  bool in_subtree(uint32_t d, uint32_t ancestor) const;
  size_t override_count() const;

 private:
  int levels_;
  int mount_default_;
  std::vector<uint32_t> dir_parent_, file_dir_;
  std::vector<uint8_t> file_rule_;
  mutable std::shared_mutex mu_;
  std::unordered_map<uint32_t, uint8_t> file_over_, dir_over_;
  std::atomic<bool> any_file_{false}, any_dir_{false};

  int dir_chain_locked(uint32_t d, bool* found) const;
};

}  // namespace fid::core

namespace fid::core {

// Level from the config rules for every file (first matching rule wins; 0 = no rule), resolved
// against the store (full -> L).
std::vector<uint8_t> rule_levels(const index::Store& store, const std::vector<config::Rule>& rules);
// The policy of a mount of `store` with `settings` (mount default and rules).
LevelPolicy make_level_policy(const index::Store& store, const config::Settings& settings);

// A JPEG's encoding (config::Encoding) is inherited exactly as its level is, from a file's or the
// nearest folder's user.fidelity.encoding, else the mount's setting: a LevelPolicy over the two
// values below holds it.
inline constexpr int kProgressive = 1;
inline constexpr int kSequential = 2;
inline config::Encoding encoding_of(int value) {
  return value == kSequential ? config::Encoding::sequential : config::Encoding::progressive;
}
LevelPolicy make_encoding_policy(const index::Store& store, const config::Settings& settings);

// Whether a clip's frame read reads its whole clip run (config clip_reads), inherited the same
// way from user.fidelity.clip_reads: a LevelPolicy over these two values.
inline constexpr int kClipReadsOn = 1;
inline constexpr int kClipReadsOff = 2;
LevelPolicy make_clip_reads_policy(const index::Store& store, const config::Settings& settings);

}  // namespace fid::core
