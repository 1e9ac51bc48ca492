// A local folder as a pack source: the walk follows symlinks and cuts loops; files are read
// whole with O_NOATIME where permitted.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <initializer_list>
#include <utility>
#include <vector>

#include "sources/pack_source.h"

namespace fid::sources {

// Folders by device and inode: one folder whatever path (symlinks included) reaches it.
using FolderIds = std::vector<std::pair<dev_t, ino_t>>;
// The ids of those of `folders` that exist.
FolderIds folder_ids(std::initializer_list<std::filesystem::path> folders);

class FolderSource final : public PackSource {
 public:
  // The walk skips the folders `excluded` (with a reason: the store being written).
  explicit FolderSource(std::filesystem::path root, FolderIds excluded = {})
      : root_(std::move(root)), excluded_(std::move(excluded)) {}
  fid::Result<SourceTree> list(const std::atomic<bool>& cancel) override;
  fid::Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const override;
  std::string local_path(const SourceTree& tree, uint32_t i) const override { return (root_ / tree.rel(i)).string(); }

 private:
  std::filesystem::path root_;
  FolderIds excluded_;
};

}  // namespace fid::sources
