#include "sources/remote_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "net/remote_location.h"
#include "net/s3_listing.h"
#include "net/s3_requests.h"

namespace fid::sources {

namespace {

constexpr size_t kListingsAtOnce = 16;   // folder listings in flight (http)
constexpr size_t kMaxFolderDepth = 128;  // deeper is taken for a link loop on the server (http)

// The listing: objects and folders (key relative to the root, without a folder's trailing
// '/'), by normalized path, the key kept only when it is not the path. Entries that cannot be
// paths go straight to `skipped`.
class Listing {
 public:
  enum Kind : uint8_t { file, dir, other };
  struct [[gnu::packed]] Info {  // packed: 17 bytes a listed object
    uint64_t size;
    int64_t mtime_ns;
    Kind kind;
  };

  // `invalid`: why the key cannot be a path, if known. True when the entry is kept (a folder
  // then may be listed), false when it is skipped; ENOMEM when the listing cannot grow (the
  // message the reason only).
  Result<bool> add(Kind kind, std::string_view key, uint64_t size, int64_t mtime_ns, std::string_view invalid = {}) {
    newest_ = std::max(newest_, mtime_ns);
    auto skip = [&](std::string why) {
      skipped_.emplace_back(std::string(key) + (kind == dir ? "/" : ""), std::move(why));
      return false;
    };
    if (!invalid.empty()) return skip(std::string(invalid));
    Result<std::string> path = normalize_source_path(key);
    if (!path) return skip(path.error().message);
    Status added = paths_.add(Info{size, mtime_ns, kind}, *path, *path == key ? std::string_view{} : key);
    if (!added && added.error().code == ENAMETOOLONG) return skip(added.error().message);
    if (!added) return std::move(added).error();
    return true;
  }
  bool empty() const { return paths_.size() == 0 && skipped_.empty(); }
  int64_t newest() const { return newest_; }
  PathListing<Info>& paths() { return paths_; }  // extra: the key, when not the path
  std::vector<std::pair<std::string, std::string>> take_skipped() { return std::move(skipped_); }

 private:
  PathListing<Info> paths_;
  std::vector<std::pair<std::string, std::string>> skipped_;  // key, why
  int64_t newest_ = 0;
};

struct FileRef {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// One whole-object GET: its buffer, filled by the client's transfer thread.
struct Fetch {
  std::vector<uint8_t> bytes;
  Status status;
  net::HttpResult result;
  bool done = false;
};

class RemoteSource final : public PackSource {
 public:
  RemoteSource(net::StoreUrl url, net::RemoteLocation where, net::HttpOptions http)
      : url_(std::move(url)), where_(std::move(where)), bucket_(bucket_of(where_)), client_(std::move(http)) {}

  Result<SourceTree> list(const std::atomic<bool>& cancel) override;
  Result<SourceBytes> read(const SourceTree& tree, uint32_t i) const override;
  void will_read(const std::vector<uint32_t>& order) override;
  bool read_errors_fail() const override { return true; }

 private:
  static net::RemoteLocation bucket_of(net::RemoteLocation where) {
    where.base_path = where.bucket_path;
    return where;
  }
  std::string root_text() const { return url_.text.ends_with('/') ? url_.text.substr(0, url_.text.size() - 1) : url_.text; }
  // A GET of `path` (relative to the source's root) and what it got, waited for.
  std::pair<Status, std::string> get_text(net::HttpRequest req) const;
  Error listing_error(const Status& s, const net::HttpResult& r, std::string_view what) const;
  // A listing that cannot be kept (ENOMEM), naming the source.
  Error listing_failed(const Error& e) const { return Error{e.code, fmt::format("{}: cannot list: {}", root_text(), e.message)}; }
  Status list_s3(Listing& out, const std::atomic<bool>& cancel);
  Status list_http(Listing& out, const std::atomic<bool>& cancel);
  Status list_http_folders(const std::vector<std::string>& folders, Listing& out, std::vector<std::string>& next);
  Result<SourceTree> build(Listing& listing);

  std::string key_of(const SourceTree& tree, uint32_t i) const;
  std::shared_ptr<Fetch> submit(const SourceTree& tree, uint32_t i) const;
  void top_up(const SourceTree& tree) const;  // with mu_ held
  Result<SourceBytes> finish(const SourceTree& tree, uint32_t i, Fetch& f) const;

  const net::StoreUrl url_;
  const net::RemoteLocation where_;
  const net::RemoteLocation bucket_;  // s3: the bucket itself, whose listing is requested
  std::vector<FileRef> files_;
  std::unordered_map<uint32_t, std::string> odd_keys_;  // files whose key is not their path

  // The prefetch window: GETs submitted in pack's order and not yet taken by a read.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<uint32_t> order_;
  mutable size_t next_ = 0;           // the next position of order_ to submit
  mutable std::vector<bool> taken_;   // by file: read already (directly or from the window)
  mutable std::unordered_map<uint32_t, std::shared_ptr<Fetch>> window_;
  mutable uint64_t window_bytes_ = 0;
  // Last: destroyed first, so that its cancelled requests' callbacks find the rest alive.
  mutable net::HttpClient client_;
};

std::pair<Status, std::string> RemoteSource::get_text(net::HttpRequest req) const {
  const std::string url = req.url;
  std::string body;
  bool too_big = false;
  req.sink = [&body, &too_big](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset + bytes.size() > net::kMaxListingBytes) {
      too_big = true;
      return false;
    }
    if (body.size() < offset + bytes.size()) body.resize(offset + bytes.size());
    std::copy(bytes.begin(), bytes.end(), body.begin() + static_cast<std::ptrdiff_t>(offset));
    return true;
  };
  auto [status, result] = client_.perform(std::move(req));
  if (too_big) return {Error{EFBIG, fmt::format("{}: listing larger than {} MiB", net::url_for_messages(url), net::kMaxListingBytes >> 20)}, ""};
  if (!status) return {listing_error(status, result, url), ""};
  body.resize(result.body_bytes);
  return {Status{}, std::move(body)};
}

Error RemoteSource::listing_error(const Status& s, const net::HttpResult& r, std::string_view url) const {
  const std::string code = r.s3.code.empty() ? "" : " " + r.s3.code;
  const std::string text = root_text();
  if (r.status == 404 && r.s3.code == "NoSuchBucket")
    return Error{ENOENT, fmt::format("{}: there is no bucket named '{}' at {} (NoSuchBucket)", text, url_.bucket, where_.origin)};
  if ((r.status == 401 || r.status == 403) && where_.sign)
    return Error{EACCES, fmt::format("{}: access denied listing {} (HTTP {}{}): check the credentials (from {}) and their "
                                     "permission to list the bucket",
                                     text, net::url_for_messages(url), r.status, code, where_.credentials_from)};
  if (r.status == 401 || r.status == 403)
    return Error{EACCES, fmt::format("{}: access denied listing {} (HTTP {}): the server must list folders as JSON "
                                     "(nginx: autoindex on; autoindex_format json;)",
                                     text, net::url_for_messages(url), r.status)};
  if (r.status == 404) return Error{ENOENT, fmt::format("{}: no such folder: {} (HTTP 404)", text, net::url_for_messages(url))};
  if (r.status == 0)
    return Error{s.error().code, fmt::format("{}: cannot reach {}: {}", text, where_.origin, s.error().message)};
  return Error{s.error().code, fmt::format("{}: cannot list: {}", text, s.error().message)};
}

Status RemoteSource::list_s3(Listing& out, const std::atomic<bool>& cancel) {
  const std::string prefix = url_.prefix.empty() ? "" : url_.prefix + "/";
  std::string token;
  do {
    if (cancel) return Error{ECANCELED, "interrupted"};
    auto [got, body] = get_text(net::list_objects_v2(bucket_, prefix, token));
    if (!got) return std::move(got).error();
    Result<net::ListPage> page = net::parse_list_objects_v2(body);
    if (!page) return Error{EPROTO, fmt::format("{}: the listing is not understood: {}", root_text(), page.error().message)};
    for (const net::ListedObject& o : page->objects) {
      if (!o.key.starts_with(prefix))
        return Error{EPROTO, fmt::format("{}: the listing names '{}', not under '{}'", root_text(), o.key, prefix)};
      std::string_view key = std::string_view(o.key).substr(prefix.size());
      const bool folder = key.ends_with('/');
      if (folder) key.remove_suffix(1);
      if (Result<bool> kept = out.add(folder ? Listing::dir : Listing::file, key, o.size, o.mtime_ns); !kept)
        return listing_failed(std::move(kept).error());
    }
    token = page->truncated ? page->next_token : "";
  } while (!token.empty());
  if (out.empty()) return Error{ENOENT, fmt::format("no objects under {}", root_text())};
  return {};
}

Status RemoteSource::list_http_folders(const std::vector<std::string>& folders, Listing& out,
                                       std::vector<std::string>& next) {
  struct Answer {
    Status status;
    net::HttpResult result;
    std::string body;
    bool too_big = false;
  };
  std::vector<Answer> answers(folders.size());
  std::mutex done_mu;
  std::condition_variable done_cv;
  size_t pending = folders.size();
  for (size_t k = 0; k < folders.size(); ++k) {
    net::HttpRequest req = net::list_folder(where_, folders[k]);
    Answer& a = answers[k];
    req.sink = [&a](uint64_t offset, std::span<const uint8_t> bytes) {
      if (offset + bytes.size() > net::kMaxListingBytes) {
        a.too_big = true;
        return false;
      }
      if (a.body.size() < offset + bytes.size()) a.body.resize(offset + bytes.size());
      std::copy(bytes.begin(), bytes.end(), a.body.begin() + static_cast<std::ptrdiff_t>(offset));
      return true;
    };
    req.done = [&a, &done_mu, &done_cv, &pending](Status s, const net::HttpResult& r) {
      std::lock_guard lock(done_mu);
      a.status = std::move(s);
      a.result = r;
      if (--pending == 0) done_cv.notify_all();
    };
    client_.submit(std::move(req));
  }
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return pending == 0; });
  for (size_t k = 0; k < folders.size(); ++k) {
    Answer& a = answers[k];
    const std::string url = net::list_folder(where_, folders[k]).url;
    if (a.too_big) return Error{EFBIG, fmt::format("{}: listing larger than {} MiB", url, net::kMaxListingBytes >> 20)};
    if (!a.status) return listing_error(a.status, a.result, url);
    a.body.resize(a.result.body_bytes);
    Result<std::vector<net::AutoindexEntry>> listed = net::parse_autoindex_json(a.body);
    if (!listed) return Error{EPROTO, fmt::format("{}: {} (the server must list folders as JSON: nginx autoindex on; "
                                                  "autoindex_format json;)", url, listed.error().message)};
    for (const net::AutoindexEntry& item : *listed) {
      const std::string key = folders[k].empty() ? item.name : folders[k] + "/" + item.name;
      const bool is_dir = item.type == net::AutoindexEntry::Type::dir;
      std::string too_deep;
      if (is_dir && std::count(key.begin(), key.end(), '/') + 1 > static_cast<std::ptrdiff_t>(kMaxFolderDepth))
        too_deep = fmt::format("more than {} folders deep (a link loop on the server?)", kMaxFolderDepth);
      const Listing::Kind kind = is_dir ? Listing::dir
                                 : item.type == net::AutoindexEntry::Type::other ? Listing::other
                                                                                 : Listing::file;
      Result<bool> kept = out.add(kind, key, item.size, item.mtime_ns, too_deep);
      if (!kept) return listing_failed(std::move(kept).error());
      if (is_dir && *kept) next.push_back(key);
    }
  }
  return {};
}

Status RemoteSource::list_http(Listing& out, const std::atomic<bool>& cancel) {
  std::vector<std::string> level{""};
  while (!level.empty()) {
    std::vector<std::string> next;
    for (size_t from = 0; from < level.size(); from += kListingsAtOnce) {
      if (cancel) return Error{ECANCELED, "interrupted"};
      const std::vector<std::string> batch(level.begin() + static_cast<std::ptrdiff_t>(from),
                                           level.begin() + static_cast<std::ptrdiff_t>(std::min(level.size(), from + kListingsAtOnce)));
      if (Status s = list_http_folders(batch, out, next); !s) return s;
    }
    level = std::move(next);
  }
  return {};
}

Result<SourceTree> RemoteSource::build(Listing& listing) {
  PathListing<Listing::Info>& paths = listing.paths();
  paths.sort();
  files_.reserve(paths.size());  // pages are touched only as files are added: no growth copies
  SourceTreeBuilder builder(listing.newest());
  Status built = paths.drain([&](const PathListing<Listing::Info>::Entry& e) -> Status {
    const auto& [info, path_view, key] = e;
    const std::string path(path_view);
    Status added;
    if (info.kind == Listing::dir) {
      added = builder.add_dir(path, info.mtime_ns, info.mtime_ns);
    } else if (info.kind == Listing::other) {
      added = builder.add_skipped(path, "not a regular file or folder", info.mtime_ns);
    } else {
      Result<bool> in_tree = builder.add_file(path, info.size, info.mtime_ns);
      if (!in_tree) {
        added = std::move(in_tree).error();
      } else if (*in_tree) {
        if (!key.empty()) odd_keys_.emplace(static_cast<uint32_t>(files_.size()), key);
        files_.push_back(FileRef{info.size, info.mtime_ns});
      }
    }
    if (!added) return Error{added.error().code, fmt::format("{}: '{}': {}", root_text(), key.empty() ? path_view : key,
                                                            added.error().message)};
    return {};
  });
  if (!built) return std::move(built).error();
  SourceTree tree = builder.take();
  for (auto& skipped : listing.take_skipped()) tree.skipped.push_back(std::move(skipped));
  return tree;
}

Result<SourceTree> RemoteSource::list(const std::atomic<bool>& cancel) {
  Listing listing;
  Status listed = url_.kind == net::StoreUrl::Kind::s3 ? list_s3(listing, cancel) : list_http(listing, cancel);
  if (!listed) return std::move(listed).error();
  return build(listing);
}

// ---------------------------------------------------------------------------------------------
// Reads

std::string RemoteSource::key_of(const SourceTree& tree, uint32_t i) const {
  auto odd = odd_keys_.find(i);
  return odd == odd_keys_.end() ? tree.rel(i) : odd->second;
}

std::shared_ptr<Fetch> RemoteSource::submit(const SourceTree& tree, uint32_t i) const {
  auto f = std::make_shared<Fetch>();
  f->bytes.resize(files_[i].size);
  const std::string key = key_of(tree, i);
  net::HttpRequest req = net::get_object(where_, key);
  req.dst = f->bytes;
  req.done = [this, f](Status s, const net::HttpResult& r) {
    std::lock_guard lock(mu_);
    f->status = std::move(s);
    f->result = r;
    f->done = true;
    cv_.notify_all();
  };
  client_.submit(std::move(req));
  return f;
}

void RemoteSource::top_up(const SourceTree& tree) const {
  while (next_ < order_.size() && window_.size() < kPrefetchFiles) {
    const uint32_t i = order_[next_];
    if (taken_[i]) {
      ++next_;
      continue;
    }
    if (!window_.empty() && window_bytes_ + files_[i].size > kPrefetchBytes) return;
    window_.emplace(i, submit(tree, i));
    window_bytes_ += files_[i].size;
    ++next_;
  }
}

void RemoteSource::will_read(const std::vector<uint32_t>& order) {
  std::lock_guard lock(mu_);
  order_ = order;
  next_ = 0;
  taken_.assign(files_.size(), false);
}

Result<SourceBytes> RemoteSource::read(const SourceTree& tree, uint32_t i) const {
  if (i >= files_.size()) return Error{EINVAL, "no such file in the listing"};
  std::shared_ptr<Fetch> f;
  {
    std::unique_lock lock(mu_);
    if (!taken_.empty()) {
      top_up(tree);
      taken_[i] = true;
      if (auto it = window_.find(i); it != window_.end()) {
        f = it->second;
        window_.erase(it);
        window_bytes_ -= files_[i].size;
        top_up(tree);  // the window moves on before this read waits for its bytes
      }
    }
    if (!f) f = submit(tree, i);
    cv_.wait(lock, [&] { return f->done; });
  }
  return finish(tree, i, *f);
}

Result<SourceBytes> RemoteSource::finish(const SourceTree& tree, uint32_t i, Fetch& f) const {
  const std::string object = root_text() + "/" + key_of(tree, i);
  const uint64_t listed = files_[i].size;
  if (!f.status) {
    const Error& e = f.status.error();
    if (e.code == ENOENT) return Error{ENOENT, fmt::format("{}: gone since it was listed ({})", object, e.message)};
    if (e.code == EACCES)
      return Error{EACCES, fmt::format("{}: access denied ({}){}", object, e.message,
                                       where_.sign ? fmt::format("; credentials from {}", where_.credentials_from) : "")};
    if (e.message.find("larger than the") != std::string::npos)
      return Error{EIO, fmt::format("{}: larger than the {} bytes listed (changed since it was listed): {}", object, listed, e.message)};
    return Error{e.code, fmt::format("{}: cannot read: {}", object, e.message)};
  }
  if (f.result.body_bytes != listed)
    return Error{EIO, fmt::format("{}: {} bytes, the listing said {} (changed since it was listed)", object,
                                  f.result.body_bytes, listed)};
  return SourceBytes{std::move(f.bytes), files_[i].mtime_ns};
}

}  // namespace

Result<std::unique_ptr<PackSource>> make_remote_source(const net::StoreUrl& url, const storage::StoreOptions& opts, net::HttpOptions http) {
  if (!url.remote()) return Error{EINVAL, fmt::format("{}: not an s3:// or http(s):// URL", url.text)};
  http.max_in_flight = opts.max_requests;
  http.ca_file = opts.ca_file;
  Result<net::RemoteLocation> where = net::remote_location(url, opts.s3);
  if (!where) return std::move(where).error();
  return std::unique_ptr<PackSource>(std::make_unique<RemoteSource>(url, std::move(where).value(), std::move(http)));
}

}  // namespace fid::sources
