#include "core/control_files.h"

#include "core/telemetry.h"

namespace fid::core {

ControlFiles::ControlFiles(const InodeMap& inodes, const Telemetry& telemetry) : inodes_(inodes), telemetry_(telemetry) {}

uint64_t ControlFiles::snapshot_inode(NodeType t) {
  auto text = std::make_shared<const std::string>(telemetry_.render(t));
  std::lock_guard lock(mu_);
  auto& [last_gen, last] = latest_[snapshot_index(t)];
  if (last && *last == *text) return inodes_.ctl_snapshot(t, last_gen);
  const uint64_t gen = next_generation_++;
  kept_.emplace_back(gen, text);
  if (kept_.size() > kKept) kept_.pop_front();
  last_gen = gen;
  last = std::move(text);
  return inodes_.ctl_snapshot(t, gen);
}

ControlFiles::Text ControlFiles::content(const Node& n) const {
  {
    std::lock_guard lock(mu_);
    for (const auto& [gen, text] : kept_)
      if (gen == n.snapshot) return text;
  }
  return std::make_shared<const std::string>(telemetry_.render(n.type));
}

}  // namespace fid::core
