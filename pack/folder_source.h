// A local folder as a pack source: the walk follows symlinks and cuts loops; files are read
// whole with O_NOATIME where permitted.
#pragma once

#include <filesystem>

#include "pack/pack_source.h"

namespace fid::pack {

class FolderSource final : public PackSource {
 public:
  explicit FolderSource(std::filesystem::path root) : root_(std::move(root)) {}
  fid::Result<SourceTree> list(const std::atomic<bool>& cancel) override;
  fid::Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const override;
  std::string local_path(const SourceTree& tree, uint32_t i) const override { return (root_ / tree.rel(i)).string(); }

 private:
  std::filesystem::path root_;
};

}  // namespace fid::pack
