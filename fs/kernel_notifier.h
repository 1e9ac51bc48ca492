// The kernel's caches as the core sees them (core::KernelCache), through libfuse's notifications
// (level changes' invalidations, clip pushes' stores) and lookups through the mount itself.
#pragma once

#include <atomic>
#include <span>
#include <string>
#include <string_view>

#include "core/level_changes.h"

struct fuse_session;

namespace fid::fs {

class KernelNotifier final : public core::KernelCache {
 public:
  KernelNotifier(fuse_session* se, std::string mountpoint) : se_(se), mountpoint_(std::move(mountpoint)) {}
  // The kernel routes the mount point to this session: make_known may look names up.
  void mount_answers() { answers_.store(true); }

  Status forget_entry(uint64_t parent, std::string_view name) override;
  void forget_inode(uint64_t ino) override;
  Status store(uint64_t ino, std::span<const uint8_t> data, std::span<const uint8_t> tail) override;
  Status make_known(std::span<const std::string> paths, const std::function<void(size_t i)>& known) override;
  Status list_folder(const std::string& path) override;

 private:
  fuse_session* se_;
  const std::string mountpoint_;
  std::atomic<bool> answers_{false};
};

}  // namespace fid::fs
