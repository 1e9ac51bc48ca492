#include "core/level_policy.h"

#include <algorithm>
#include <mutex>

namespace fid::core {

LevelPolicy::LevelPolicy(int levels, int mount_default, std::vector<uint32_t> dir_parent,
                         std::vector<uint32_t> file_dir, std::vector<uint8_t> file_rule)
    : levels_(levels),
      mount_default_(mount_default),
      dir_parent_(std::move(dir_parent)),
      file_dir_(std::move(file_dir)),
      file_rule_(std::move(file_rule)) {}

// Nearest override on d or its ancestors; caller holds mu_ (shared).
int LevelPolicy::dir_chain_locked(uint32_t d, bool* found) const {
  for (size_t guard = 0; guard <= dir_parent_.size(); ++guard) {
    auto it = dir_over_.find(d);
    if (it != dir_over_.end()) {
      *found = true;
      return it->second;
    }
    if (d == 0 || d >= dir_parent_.size()) break;
    d = dir_parent_[d];
  }
  *found = false;
  return 0;
}

int LevelPolicy::effective(uint32_t f) const {
  bool files = any_file_.load(std::memory_order_acquire);
  bool dirs = any_dir_.load(std::memory_order_acquire);
  if (files || dirs) {
    std::shared_lock lock(mu_);
    if (files) {
      auto it = file_over_.find(f);
      if (it != file_over_.end()) {
        return it->second;
      }
    }
    if (dirs && f < file_dir_.size()) {
      bool found = false;
      int l = dir_chain_locked(file_dir_[f], &found);
      if (found) {
        return l;
      }
    }
  }
  if (f < file_rule_.size() && file_rule_[f] != 0) {
    return file_rule_[f];
  }
  return mount_default_;
}

int LevelPolicy::dir_effective(uint32_t d) const {
  if (any_dir_.load(std::memory_order_acquire)) {
    std::shared_lock lock(mu_);
    bool found = false;
    int l = dir_chain_locked(d, &found);
    if (found) {
      return l;
    }
  }
  return mount_default_;
}

std::optional<int> LevelPolicy::file_override(uint32_t f) const {
  std::shared_lock lock(mu_);
  auto it = file_over_.find(f);
  if (it == file_over_.end()) return std::nullopt;
  return it->second;
}

std::optional<int> LevelPolicy::dir_override(uint32_t d) const {
  std::shared_lock lock(mu_);
  auto it = dir_over_.find(d);
  if (it == dir_over_.end()) return std::nullopt;
  return it->second;
}

static bool set_in(std::unordered_map<uint32_t, uint8_t>& m, uint32_t key, std::optional<int> level, int levels) {
  if (level) {
    if (*level < 1 || *level > levels) return false;
    m[key] = static_cast<uint8_t>(*level);
    return true;
  }
  return m.erase(key) > 0;
}

bool LevelPolicy::set_file(uint32_t f, std::optional<int> level) {
  if (f >= file_dir_.size()) return false;
  std::unique_lock lock(mu_);
  bool ok = set_in(file_over_, f, level, levels_);
  any_file_.store(!file_over_.empty(), std::memory_order_release);
  return ok;
}

bool LevelPolicy::set_dir(uint32_t d, std::optional<int> level) {
  if (d >= dir_parent_.size()) return false;
  std::unique_lock lock(mu_);
  bool ok = set_in(dir_over_, d, level, levels_);
  any_dir_.store(!dir_over_.empty(), std::memory_order_release);
  return ok;
}

bool LevelPolicy::in_subtree(uint32_t d, uint32_t ancestor) const {
  for (size_t guard = 0; guard <= dir_parent_.size(); ++guard) {
    if (d == ancestor) return true;
    if (d == 0 || d >= dir_parent_.size()) return false;
    d = dir_parent_[d];
  }
  return false;
}

size_t LevelPolicy::override_count() const {
  std::shared_lock lock(mu_);
  return file_over_.size() + dir_over_.size();
}

std::vector<uint8_t> rule_levels(const index::Store& store, const std::vector<config::Rule>& rules) {
  auto files = store.files();
  std::vector<uint8_t> out(rules.empty() ? 0 : files.size(), 0);
  if (rules.empty()) return out;
  const int L = store.levels();
  // Directory paths once, then "dir/name" per file.
  auto dirs = store.dirs();
  std::vector<std::string> dir_path(dirs.size());
  for (size_t d = 0; d < dirs.size(); ++d) dir_path[d] = store.relative_path(dirs[d]);
  std::string path;
  for (const index::File& f : files) {
    path.assign(dir_path[f.dir]);
    if (!path.empty()) path.push_back('/');
    path.append(store.name(f));
    for (const auto& r : rules) {
      if (config::glob_match(r.glob, path)) {
        out[f.id] = static_cast<uint8_t>(r.level >= config::kFull ? L : std::min(r.level, L));
        break;
      }
    }
  }
  return out;
}

namespace {
LevelPolicy policy_over_tree(const index::Store& store, int values, int mount_default, std::vector<uint8_t> rules) {
  std::vector<uint32_t> parent, fdir;
  parent.reserve(store.dirs().size());
  for (const index::Dir& d : store.dirs()) parent.push_back(d.parent);
  fdir.reserve(store.files().size());
  for (const index::File& f : store.files()) fdir.push_back(f.dir);
  return LevelPolicy(values, mount_default, std::move(parent), std::move(fdir), std::move(rules));
}
}  // namespace

LevelPolicy make_level_policy(const index::Store& store, const config::Settings& s) {
  const int def = s.scan_group >= config::kFull ? store.levels() : std::min(s.scan_group, store.levels());
  return policy_over_tree(store, store.levels(), std::max(def, 1), rule_levels(store, s.rules));
}

LevelPolicy make_encoding_policy(const index::Store& store, const config::Settings& s) {
  return policy_over_tree(store, 2, s.encoding == config::Encoding::sequential ? kSequential : kProgressive, {});
}

LevelPolicy make_clip_reads_policy(const index::Store& store, const config::Settings& s) {
  return policy_over_tree(store, 2, s.clip_reads ? kClipReadsOn : kClipReadsOff, {});
}

}  // namespace fid::core
