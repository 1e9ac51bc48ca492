// Opening a store on S3 or an HTTP(S) server: one GET of index.sqlite (reused from the index
// cache when the server's ETag has not changed), then a HEAD of every record in parallel to
// refuse a store whose records are missing or short. Nothing is listed: a store uploaded
// records first and index.sqlite last is complete once its index is there.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/error.h"
#include "index/store.h"
#include "net/http_client.h"
#include "net/url.h"
#include "storage/http_record_source.h"
#include "storage/open_store.h"

namespace fid::storage {

struct RemoteStore {
  std::unique_ptr<index::Store> store;
  std::unique_ptr<RecordSource> source;  // starts its transfer thread on first use (after fork)
  std::filesystem::path index_file;      // the cached copy of index.sqlite
  std::string index_etag;                // the server's ETag of it ("" when it gave none)
  std::string identity;                  // hex XXH3-64 of the index file
};

// Errors name the URL and what to do: no index.sqlite (not a store, or not uploaded yet),
// access denied (and where the credentials came from; never a secret), no such bucket, an
// endpoint that cannot be reached, missing or short records (how many, the first few).
// `http` tunes the requests (tests shrink its timeouts); max_in_flight and ca_file come from
// `opts`.
Result<RemoteStore> open_remote_store(const net::StoreUrl& url, const StoreOptions& opts, net::HttpOptions http = {});

// The index cache folder for `opts`: index_cache, else disk_cache, else
// $XDG_CACHE_HOME/fidelityfs, else $HOME/.cache/fidelityfs.
std::filesystem::path index_cache_dir(const StoreOptions& opts);

// Creates `dir` (and missing parents) for this user only (0700); an "index cache" Error if not,
// or if it exists and another user could write to it (common/private_dir.h).
Status make_private_dir(const std::filesystem::path& dir);

}  // namespace fid::storage
