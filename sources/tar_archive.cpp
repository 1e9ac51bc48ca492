#include "sources/tar_archive.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

namespace fid::sources {

la_ssize_t RangeInput::read(archive* a, void* self, const void** out) {
  auto* r = static_cast<RangeInput*>(self);
  const size_t want = static_cast<size_t>(std::min<uint64_t>(r->buf_.size(), r->end_ - r->pos_));
  ssize_t n;
  do n = ::pread(r->fd_, r->buf_.data(), want, static_cast<off_t>(r->pos_));
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    archive_set_error(a, errno, "read failed: %s", std::strerror(errno));
    return -1;
  }
  r->pos_ += static_cast<uint64_t>(n);
  *out = r->buf_.data();
  return n;
}

la_int64_t RangeInput::skip(archive*, void* self, la_int64_t request) {
  auto* r = static_cast<RangeInput*>(self);
  const auto n = static_cast<la_int64_t>(std::min<uint64_t>(static_cast<uint64_t>(request), r->end_ - r->pos_));
  r->pos_ += static_cast<uint64_t>(n);
  return n;
}

la_int64_t RangeInput::seek(archive*, void* self, la_int64_t offset, int whence) {
  auto* r = static_cast<RangeInput*>(self);
  const int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? static_cast<int64_t>(r->pos_ - r->begin_)
                                                                   : static_cast<int64_t>(r->end_ - r->begin_);
  const int64_t to = std::clamp<int64_t>(base + offset, 0, static_cast<int64_t>(r->end_ - r->begin_));
  r->pos_ = r->begin_ + static_cast<uint64_t>(to);
  return to;
}

la_ssize_t MemberInput::read(archive* a, void* self, const void** out) {
  auto* m = static_cast<MemberInput*>(self);
  la_ssize_t n = archive_read_data(m->outer, m->buf.data(), m->buf.size());
  if (n < 0) archive_set_error(a, archive_errno(m->outer), "%s", archive_error_string(m->outer));
  *out = m->buf.data();
  return n;
}

namespace {

ArchivePtr new_tar_reader() {
  ArchivePtr a(archive_read_new());
  archive_read_support_format_tar(a.get());
  // The compressions is_tar_name names, in-process; never libarchive's external programs.
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_zstd(a.get());
  return a;
}

}  // namespace

fid::Error archive_error(archive* a, const std::string& where) {
  const int code = archive_errno(a) > 0 ? archive_errno(a) : EIO;
  const char* why = archive_error_string(a);
  return fid::Error{code, fmt::format("{}: {}", where, why ? why : "unreadable tar")};
}

fid::Result<ArchivePtr> open_range(RangeInput& in, const std::string& where) {
  ArchivePtr a = new_tar_reader();
  archive_read_set_callback_data(a.get(), &in);
  archive_read_set_read_callback(a.get(), &RangeInput::read);
  archive_read_set_skip_callback(a.get(), &RangeInput::skip);
  archive_read_set_seek_callback(a.get(), &RangeInput::seek);
  if (archive_read_open1(a.get()) != ARCHIVE_OK) return archive_error(a.get(), where);
  return a;
}

fid::Result<ArchivePtr> open_member(MemberInput& in, const std::string& where) {
  ArchivePtr a = new_tar_reader();
  archive_read_set_callback_data(a.get(), &in);
  archive_read_set_read_callback(a.get(), &MemberInput::read);
  if (archive_read_open1(a.get()) != ARCHIVE_OK) return archive_error(a.get(), where);
  return a;
}

// The current member's data, grown as it arrives rather than sized by the header's claim.
fid::Status read_member(archive* a, uint64_t size, std::vector<uint8_t>& out) {
  constexpr size_t kChunk = size_t{1} << 20;
  out.clear();
  while (out.size() < size) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(std::min<uint64_t>(kChunk, size - at)));
    const la_ssize_t n = archive_read_data(a, out.data() + at, out.size() - at);
    if (n < 0) return archive_error(a, "read failed");
    out.resize(at + static_cast<size_t>(n));
    if (n == 0) return fid::Error{EIO, "the member's data ends early"};
  }
  return {};
}

}  // namespace fid::sources
