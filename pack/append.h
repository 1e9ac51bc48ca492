// `fidelityfs pack --append SRC... STORE`: adds a source's files and folders to an existing local
// store as new records and a new index, never rewriting a record already there (docs/FORMAT.md
// "Appended stores"). The new files are packed as a store of their own inside STORE
// (.append-part), their records renamed into STORE/records/ after the store's last one, then
// the union index is written as index.sqlite.partial and renamed over index.sqlite: a mount
// opened before keeps its index, and a killed append leaves the store as it was, its leftovers
// removed by the next append.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "pack/packer.h"

namespace fid::pack {

// The options a store fixes (meta keys: level_scripts, layout, record_bytes, seed) that the
// command line gave, as meta values ("fast", "scan", "4194304", "7").
using GivenStoreOptions = std::vector<std::pair<std::string, std::string>>;

// Takes the levels, layout, record size and seed of the store named `store` into `opt`, from
// its index in the folder `index_dir`; a given option that differs is refused, naming it and
// both values (EINVAL). So is a store that is not a whole store (a part of a sharded pack; not a
// store).
fid::Status take_store_options(PackOptions& opt, const GivenStoreOptions& given, const std::filesystem::path& index_dir,
                               const std::string& store);

struct AppendReport {
  PackReport pack;                // the appended files, as pack reports them
  uint64_t bytes_written = 0;     // the new records and the new index
  uint32_t first_record = 0;      // the id of the first new record
  uint64_t files_before = 0, files_after = 0;
  uint64_t replaced = 0;          // the store's files that appended ones replaced (--replace)
};

// Appends opt.sources to the store at opt.store (options from take_store_options). Refuses a
// source path that the store already has (a file or a folder that is a file there, or the
// reverse; with opt.replace, a file there is replaced by the source's and its bytes stay in their
// record, unreferenced), naming the first ones, and a second append while one runs (EBUSY, a lock on the
// store folder). On any failure, and on `cancel`, the store is left as it was.
fid::Result<AppendReport> append(const PackOptions& opt, PackIo io,
                                 const std::function<void(const PackProgress&)>& progress,
                                 const std::atomic<bool>& cancel);

// What an interrupted append left in a store: paths relative to it (the part folder, a partial
// index, record files after the index's last record), for inspect and verify. `records`: the
// index's record count.
std::vector<std::string> append_leftovers(const std::filesystem::path& store, uint64_t records);

}  // namespace fid::pack
