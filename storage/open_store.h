// Opens a store wherever it lives (a folder, s3://, http(s)://) as an index::Store plus the
// RecordSource that reads its records, optionally behind the local disk cache. The one entry
// point for mount, inspect and verify.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/error.h"
#include "index/store.h"
#include "net/aws_config.h"
#include "storage/record_source.h"

namespace fid::storage {

struct StoreOptions {
  net::S3Options s3;                    // s3:// only
  std::string ca_file;             // https: PEM CA bundle instead of the system CAs
  std::string disk_cache;          // "" = no disk cache of record prefixes (remote stores only)
  // The disk cache's bound in bytes: the mount's disk_cache_size setting (its default is
  // config::Settings', cli::store_options fills this in), so no default of its own here.
  uint64_t disk_cache_size = 0;
  // Where a remote store's index is cached (keyed by URL and ETag): disk_cache if set, else
  // $XDG_CACHE_HOME/fidelityfs, else $HOME/.cache/fidelityfs.
  std::string index_cache;
  // Map the store's tables from a tables file in <index cache>/tables, made on the first open
  // (index/tables_file.h), instead of holding them in memory. The mount does.
  bool map_tables = false;
  unsigned max_requests = 64;      // remote requests in flight at once
  // A remote index larger than this is refused while it downloads (a server that sends without
  // end fills no disk); 16 GiB is about 100 million files.
  uint64_t max_index_bytes = uint64_t{16} << 30;
  // Local stores: O_DIRECT reads (the page cache is left to the loader's own data); false reads
  // through the page cache, for a reader of whole records in order (relayout).
  bool direct_io = true;
  // Once *cancel is true, a remote store's requests end (ECANCELED) within about a second: its
  // index and record checks while it opens, and its source's reads (RecordSource::cancel_on).
  const std::atomic<bool>* cancel = nullptr;
};

struct OpenedStore {
  std::unique_ptr<index::Store> store;
  // Reads the records. A remote source starts its transfer thread on first use, so a store may
  // be opened before the mount daemonises (fork) and read after.
  std::unique_ptr<RecordSource> source;
  std::filesystem::path index_file;  // the local index (a remote store's cached copy)
  std::string identity;              // hex XXH3-64 of the index: names the store in the disk cache
};

// Local: loads STORE/index.sqlite and opens the record files (problems() lists bad records;
// their files read as EIO). Remote: one GET of the index (a cached copy with the same ETag is
// reused), then a HEAD of every record in parallel; a missing index, a missing or short record,
// wrong credentials, a missing bucket or an unreachable endpoint is an Error naming what failed
// (never a secret).
// Where the tables files live for `opts` (created): <index cache>/tables, or empty without
// map_tables.
std::filesystem::path tables_dir(const StoreOptions& opts);

Result<OpenedStore> open_store(const std::string& location, const StoreOptions& opts);

}  // namespace fid::storage
