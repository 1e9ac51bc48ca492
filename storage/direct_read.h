// O_DIRECT reads into the thread's bounce buffer: a page-aligned buffer per thread that the
// local store's reads and the disk cache's land in, so that a read_scratch result is served from
// where the disk put it. A result points into the buffer until the thread's next read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/error.h"

namespace fid::storage {

constexpr uint64_t kSector = 512;  // what O_DIRECT offsets and lengths are aligned to
constexpr uint64_t kPage = 4096;

constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The sector-aligned span an O_DIRECT read of [offset, offset + len) covers: its first byte and length.
constexpr uint64_t sector_start(uint64_t offset) { return offset / kSector * kSector; }
constexpr uint64_t sector_span(uint64_t offset, uint64_t len) { return round_up(offset + len, kSector) - sector_start(offset); }

// The bounce buffer a thread keeps. A read that needs more (a batch of ranges gathering or
// extending a record's prefix, a clip run: up to a record's size) borrows a larger one, given back
// after it: otherwise every thread that once loaded a record would keep one, beyond the cache's
// budget. At most 4 larger buffers wait unused for the next such read.
constexpr uint64_t kBounceBytes = 256 * 1024;

// At least n bytes of the thread's bounce buffer (its earlier contents are gone); nullptr if it
// cannot be had. A larger buffer the thread borrowed and n does not need is given back first.
uint8_t* thread_scratch(size_t n);
// Gives back the larger buffer the thread borrowed, if any: its reads are copied out.
void give_back_large_scratch();
// The bytes of the thread's bounce buffers now (0: none yet).
size_t thread_scratch_size();
// Reads that could not be reaped may still land in the thread's buffer: it is never used (nor
// freed) again, and the thread's next thread_scratch allocates another.
void abandon_thread_scratch();

// Bytes [offset, offset + len) of the O_DIRECT descriptor fd, read as their sector-aligned span
// into the thread's bounce buffer; `what` names the file in errors. EINVAL: the filesystem wants
// another alignment, ENOMEM: no bounce buffer (read buffered then); EIO: the file ends before
// offset + len.
Result<std::span<const uint8_t>> read_direct(int fd, uint64_t offset, uint64_t len, std::string_view what);

}  // namespace fid::storage
