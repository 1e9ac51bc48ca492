#include "storage/direct_read.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/posix_io.h"

namespace fid::storage {

namespace {

struct Scratch {
  uint8_t* p = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(p); }
};
thread_local Scratch t_scratch;

}  // namespace

uint8_t* thread_scratch(size_t n) {
  Scratch& s = t_scratch;
  if (n > s.cap || (s.cap > kBounceBytes && n <= kBounceBytes)) {
    std::free(s.p);
    s.cap = round_up(std::max<size_t>(n, kBounceBytes), kPage);
    s.p = static_cast<uint8_t*>(std::aligned_alloc(kPage, s.cap));
    if (!s.p) s.cap = 0;
  }
  return s.p;
}

size_t thread_scratch_size() { return t_scratch.cap; }

void shrink_thread_scratch() {
  Scratch& s = t_scratch;
  if (s.cap <= kBounceBytes) return;
  std::free(s.p);
  s.p = nullptr;
  s.cap = 0;
}

void abandon_thread_scratch() {
  Scratch& s = t_scratch;
  if (s.p) {
    static std::mutex mu;
    static auto* abandoned = new std::vector<uint8_t*>();  // never destroyed: outlives every thread
    std::lock_guard lock(mu);
    abandoned->push_back(s.p);
  }
  s.p = nullptr;
  s.cap = 0;
}

Result<std::span<const uint8_t>> read_direct(int fd, uint64_t offset, uint64_t len, std::string_view what) {
  const uint64_t a0 = sector_start(offset);
  const uint64_t span = sector_span(offset, len);
  uint8_t* buf = thread_scratch(span);
  if (!buf) return Error{ENOMEM, fmt::format("{}: no buffer for a read of {} bytes", what, span)};
  Result<uint64_t> got = pread_loop(fd, buf, span, a0, what);
  if (!got) return std::move(got).error();
  if (*got < offset - a0 + len) return Error{EIO, fmt::format("{}: short read at offset {}", what, offset)};
  return std::span<const uint8_t>(buf + (offset - a0), len);
}

}  // namespace fid::storage
