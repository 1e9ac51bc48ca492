// libarchive readers of tars for the tar source: an archive over a byte range of a file (read at
// random with pread, so that members' offsets are absolute in the file), or over the data of the
// current member of another archive (a stream). Only in-process filters (gzip, bzip2, xz, zstd).
#pragma once

#include <archive.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace fid::sources {

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveDeleter>;

// Bytes [begin, end) of file `fd` as an archive's input; the archive's positions are relative to
// `begin`.
class RangeInput {
 public:
  RangeInput(int fd, uint64_t begin, uint64_t end) : fd_(fd), begin_(begin), end_(end), pos_(begin), buf_(1 << 16) {}
  uint64_t begin() const { return begin_; }
  uint64_t end() const { return end_; }
  int fd() const { return fd_; }

  static la_ssize_t read(archive* a, void* self, const void** out);
  static la_int64_t skip(archive*, void* self, la_int64_t request);
  static la_int64_t seek(archive*, void* self, la_int64_t offset, int whence);

 private:
  int fd_;
  uint64_t begin_, end_, pos_;
  std::vector<uint8_t> buf_;
};

// The data of the current member of `outer`, as the input of an inner archive.
struct MemberInput {
  archive* outer;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);

  static la_ssize_t read(archive* a, void* self, const void** out);
};

fid::Result<ArchivePtr> open_range(RangeInput& in, const std::string& where);
fid::Result<ArchivePtr> open_member(MemberInput& in, const std::string& where);

// libarchive's last error on `a`, after `where`.
fid::Error archive_error(archive* a, const std::string& where);

// The current member's data, grown as it arrives rather than sized by the header's claim.
fid::Status read_member(archive* a, uint64_t size, std::vector<uint8_t>& out);

}  // namespace fid::sources
