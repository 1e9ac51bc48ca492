// verify's check of one file, shared by `fidelityfs verify` and the tests that write stores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "index/store.h"
#include "storage/record_source.h"

namespace fid::cli {

// Checks one file: every piece's checksum, and for a JPEG a strict decode at every level (of the
// index's pixel size), for an L3 file a full decode. "" when it is sound, else why not. `buf` is
// scratch memory, reused between calls.
std::string verify_file(const index::Store& store, storage::RecordSource& source, const index::File& f,
                        std::vector<uint8_t>& buf);

}  // namespace fid::cli
