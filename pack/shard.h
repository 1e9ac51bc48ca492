// Deterministic parts of a source (pack --shard I/N): a file belongs to part xxh64(its relative
// path, seed 0) mod N, so that machines packing the parts agree without talking, and the digest
// of the listing by which merge tells that parts come from one source (docs/FORMAT.md "meta").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "sources/pack_source.h"

namespace fid::pack {

struct Shard {
  uint32_t index = 0;  // I, 0 .. count-1
  uint32_t count = 1;  // N; 1 = the whole source
  bool operator==(const Shard&) const = default;
};

// Parses "I/N" (decimal, 0 <= I < N); the error names the spec.
fid::Result<Shard> parse_shard(std::string_view spec);
std::string shard_text(const Shard& s);  // "I/N"

// The part (0 .. count-1) a relative path belongs to.
uint32_t shard_of(std::string_view rel, uint32_t count);

// XXH64 (seed 0), as 16 lowercase hex digits, of the listing: every folder but the root in id
// order, its relative path and a NUL; then every file in id order, its relative path, a NUL and
// its listed size as u64 LE.
std::string source_digest(const sources::SourceTree& tree);

}  // namespace fid::pack
