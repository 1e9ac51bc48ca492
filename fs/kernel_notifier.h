// The kernel's caches as the core sees them (core::KernelCache), through libfuse's notifications
// (level changes' invalidations, clip pushes' stores) and lookups through the mount itself.
#pragma once

#include <atomic>
#include <span>
#include <string>
#include <string_view>

#include "core/level_changes.h"
#include "fs/own_mount.h"

struct fuse_session;

namespace fid::fs {

class KernelNotifier final : public core::KernelCache {
 public:
  KernelNotifier(fuse_session* se, std::string mountpoint) : se_(se), mount_(std::move(mountpoint)) {}
  // The kernel routes the mount point to this session, as device `dev`: make_known and
  // list_folder may reach the mount (fs/own_mount.h).
  void mount_answers(dev_t dev) { mount_.answers(dev); }
  const OwnMount& mount() const { return mount_; }

  Status forget_entry(uint64_t parent, std::string_view name) override;
  void forget_inode(uint64_t ino) override;
  Status store(uint64_t ino, std::span<const uint8_t> data, std::span<const uint8_t> tail) override;
  Status make_known(std::span<const std::string> paths, const std::function<void(size_t i)>& known) override;
  Status list_folder(const std::string& path, std::string_view until) override;

 private:
  fuse_session* se_;
  OwnMount mount_;
};

}  // namespace fid::fs
