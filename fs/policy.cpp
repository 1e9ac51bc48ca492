#include "fs/policy.h"

#include <mutex>

namespace fid::fs {

std::string_view level_source_name(LevelSource s) {
  switch (s) {
    case LevelSource::file_xattr: return "file-xattr";
    case LevelSource::dir_xattr: return "dir-xattr";
    case LevelSource::rule: return "rule";
    case LevelSource::mount: return "mount";
  }
  return "mount";
}

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

int LevelPolicy::effective(uint32_t f, LevelSource* source) const {
  bool files = any_file_.load(std::memory_order_acquire);
  bool dirs = any_dir_.load(std::memory_order_acquire);
  if (files || dirs) {
    std::shared_lock lock(mu_);
    if (files) {
      auto it = file_over_.find(f);
      if (it != file_over_.end()) {
        if (source) *source = LevelSource::file_xattr;
        return it->second;
      }
    }
    if (dirs && f < file_dir_.size()) {
      bool found = false;
      int l = dir_chain_locked(file_dir_[f], &found);
      if (found) {
        if (source) *source = LevelSource::dir_xattr;
        return l;
      }
    }
  }
  if (f < file_rule_.size() && file_rule_[f] != 0) {
    if (source) *source = LevelSource::rule;
    return file_rule_[f];
  }
  if (source) *source = LevelSource::mount;
  return mount_default_;
}

int LevelPolicy::dir_effective(uint32_t d, LevelSource* source) const {
  if (any_dir_.load(std::memory_order_acquire)) {
    std::shared_lock lock(mu_);
    bool found = false;
    int l = dir_chain_locked(d, &found);
    if (found) {
      if (source) *source = LevelSource::dir_xattr;
      return l;
    }
  }
  if (source) *source = LevelSource::mount;
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

}  // namespace fid::fs
