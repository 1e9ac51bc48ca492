// Tar files as a pack source, read with libarchive and never extracted to disk: the members of
// one or more tars (WebDataset shards) form one tree; with expand_inner_tars a member `NAME.tar`
// becomes the folder NAME holding its members (ILSVRC's train tar is a tar of class tars).
//
// An uncompressed tar is read at random: listing reads its headers only (seeking over data),
// and each file is then read with pread(2) at the offset listing found, so pack follows the
// seeded storage order. A compressed tar (gzip, zstd, ...) cannot be read at random: listing
// decompresses it once, and pack decompresses it a second time and takes the files in tar order
// (stream_order()), which becomes the storage order.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "sources/pack_source.h"

namespace fid::sources {

struct TarSourceOptions {
  std::vector<std::filesystem::path> tars;
  bool expand_inner_tars = false;
};

class TarSource final : public PackSource {
 public:
  explicit TarSource(TarSourceOptions options);
  ~TarSource() override;

  fid::Result<SourceTree> list(const std::atomic<bool>& cancel) override;
  fid::Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const override;
  std::optional<std::vector<uint32_t>> stream_order() const override;
  void read_only(std::vector<bool> files) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// True when `path` names a tar file pack can read (.tar, .tar.gz, .tgz, .tar.zst, .tar.xz,
// .tar.bz2): decided by the name, so that a folder source stays a folder.
bool is_tar_name(const std::filesystem::path& path);

}  // namespace fid::sources
