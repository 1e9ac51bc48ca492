#include "storage/open_store.h"

#include "common/private_dir.h"
#include "net/url.h"
#include "storage/disk_cache.h"
#include "storage/local_record_source.h"
#include "storage/remote_store.h"

namespace fid::storage {

std::filesystem::path tables_dir(const StoreOptions& opts) {
  if (!opts.map_tables) return {};
  const std::filesystem::path dir = index_cache_dir(opts) / "tables";
  (void)make_private_dir(dir);  // if it fails, so does writing the tables file, which says why
  return dir;
}

Result<OpenedStore> open_store(const std::string& location, const StoreOptions& opts) {
  Result<net::StoreUrl> url = net::parse_store_url(location);
  if (!url) return std::move(url).error();
  OpenedStore out;
  if (!url->remote()) {
    auto store = index::Store::open(url->local, tables_dir(opts));
    if (!store) return std::move(store).error();
    out.store = std::move(store).value();
    out.source = std::make_unique<LocalRecordSource>(*out.store, /*use_io_uring=*/true, opts.direct_io);
    out.index_file = out.store->path() / "index.sqlite";
    // identity stays empty: it names a store in the disk cache, which only remote stores use.
    return out;
  }
  if (!opts.disk_cache.empty()) {
    // Checked before anything is written there: a folder another user could write to is an error.
    Result<Fd> disk_cache = open_private_dir(opts.disk_cache, "disk cache");
    if (!disk_cache) return std::move(disk_cache).error();
  }
  Result<RemoteStore> remote = open_remote_store(*url, opts);
  if (!remote) return std::move(remote).error();
  out.store = std::move(remote->store);
  out.source = std::move(remote->source);
  out.index_file = std::move(remote->index_file);
  out.identity = std::move(remote->identity);
  if (!opts.disk_cache.empty())
    out.source = make_disk_cached_source(*out.store, std::move(out.source), opts.disk_cache,
                                         opts.disk_cache_size,
                                         out.identity);
  return out;
}

}  // namespace fid::storage
