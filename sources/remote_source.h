// Files on object storage or a web server as a pack source: s3://BUCKET/PREFIX (every key under
// PREFIX/, listed with ListObjectsV2, SigV4-signed) or http(s)://HOST/PATH (the folder and its
// subfolders, listed from the server's JSON folder listing: nginx `autoindex on;
// autoindex_format json;`). Keys ending in '/' (folder markers) are folders; names are checked
// as a tar's members are (normalize_source_path): a key that cannot be a path in the
// tree (".." or an empty segment first, a NUL byte) is skipped with the reason.
//
// Each file is one whole-object GET of the size the listing gave. Told the order pack reads in
// (will_read), the source keeps a bounded window of GETs in flight ahead of the readers on one
// HttpClient; a read takes its file from the window or GETs it itself. What is held in memory
// is bounded by the window (kPrefetchFiles, kPrefetchBytes) plus the files being read, whatever
// the source's size. A file that cannot be read (gone since it was listed, denied, of another
// size, unreachable after the client's retries) fails the pack (read_errors_fail).
#pragma once

#include <memory>

#include "common/error.h"
#include "net/http_client.h"
#include "net/url.h"
#include "sources/pack_source.h"
#include "storage/open_store.h"

namespace fid::sources {

// The window of GETs kept in flight ahead of pack's readers.
inline constexpr unsigned kPrefetchFiles = 64;
inline constexpr uint64_t kPrefetchBytes = 64ull << 20;

// A source for `url` (s3:// or http(s)://). Credentials, region, endpoint and addressing come
// from opts.s3 and the AWS settings (net/aws_config.h); opts.ca_file and opts.max_requests tune the
// client; `http` its timeouts and retries. Nothing is requested until list(). Errors (EINVAL)
// for a URL that is not remote.
Result<std::unique_ptr<PackSource>> make_remote_source(const net::StoreUrl& url, const storage::StoreOptions& opts,
                                                              net::HttpOptions http = {});

}  // namespace fid::sources
