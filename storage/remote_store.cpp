#include "storage/remote_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <semaphore>
#include <vector>

#include "common/posix_io.h"
#include "common/private_dir.h"
#include "net/aws_config.h"
#include "net/s3_requests.h"

namespace fid::storage {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kIndexName = "index.sqlite";
constexpr size_t kProblemsNamed = 5;  // records named in a "missing or short" error

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }
std::string hash_text(std::string_view s) { return hex64(XXH3_64bits(s.data(), s.size())); }

// Hex XXH3-64 of a file's bytes.
Result<std::string> hash_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error{EIO, fmt::format("{}: {}", file.string(), std::strerror(errno))};
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const bool failed = in.bad();
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (failed) return Error{EIO, fmt::format("{}: read error", file.string())};
  return hex64(h);
}

// Its first line (an ETag); "" if it is missing, not a regular file, or a symbolic link (never
// followed: what it points at would be sent to the server as If-None-Match).
std::string read_small_file(const fs::path& p) {
  const Result<Fd> fd = open_regular(p, O_NOFOLLOW);
  if (!fd) return "";
  std::string s(4096, '\0');
  const ssize_t n = ::pread(fd->get(), s.data(), s.size(), 0);
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return s.substr(0, s.find('\n'));
}

// What a failed GET of the index means, said for the user.
Error index_error(const net::RemoteLocation& where, const net::StoreUrl& url, const Error& e, const net::HttpResult& r) {
  if (r.status == 404 && r.s3.code == "NoSuchBucket") {
    return Error{ENOENT, fmt::format("{}: there is no bucket named '{}' at {} (NoSuchBucket)", where.text,
                                     r.s3.bucket.empty() ? url.bucket : r.s3.bucket, where.origin)};
  }
  if (r.status == 404) {
    return Error{ENOENT, fmt::format("{}: not a fidelityfs store: no {} (upload the records first and {} last)", where.text,
                                     kIndexName, kIndexName)};
  }
  if (r.status == 401 || r.status == 403) {
    const std::string code = r.s3.code.empty() ? "" : " " + r.s3.code;
    if (where.sign) {
      return Error{EACCES, fmt::format("{}: access denied (HTTP {}{}): check the credentials (from {}) and their "
                                       "permission to read the bucket",
                                       where.text, r.status, code, where.credentials_from)};
    }
    return Error{EACCES, fmt::format("{}: access denied (HTTP {}{}) fetching {}", where.text, r.status, code, kIndexName)};
  }
  if (r.status == 0) return Error{e.code, fmt::format("{}: cannot reach the endpoint {}: {}", where.text, where.origin, e.message)};
  const std::string detail = r.s3.message.empty() ? "" : fmt::format(" ({})", r.s3.message);
  return Error{e.code, fmt::format("{}: cannot fetch {}: {}{}", where.text, kIndexName, e.message, detail)};
}

struct FetchedIndex {
  fs::path file;
  std::string etag;  // the server's; "" when it gave none
};

// The index in the cache: reused when the server's ETag matches the cached copy's (one
// conditional GET), else downloaded to a temporary file, synced and renamed into place.
Result<FetchedIndex> fetch_index(net::HttpClient& client, const net::StoreUrl& url, const net::RemoteLocation& where, const fs::path& dir,
                             const std::atomic<bool>* cancel,
                             uint64_t max_bytes) {
  if (Status s = make_private_dir(dir); !s) return std::move(s).error();
  const std::string index_url = where.url_of(kIndexName);
  const std::string key = "index-" + hash_text(index_url);
  const fs::path etag_file = dir / (key + ".etag");
  const auto cached_file = [&](std::string_view etag) { return dir / fmt::format("{}-{}.sqlite", key, hash_text(etag)); };

  net::HttpRequest req = net::get_object(where, kIndexName);
  req.cancel = cancel;
  const std::string cached_etag = read_small_file(etag_file);
  if (!cached_etag.empty() && fs::exists(cached_file(cached_etag))) req.headers.emplace_back("If-None-Match", cached_etag);

  std::string tmp_name = (dir / (key + ".partial.XXXXXX")).string();
  Fd fd(::mkstemp(tmp_name.data()));
  if (fd.get() < 0) return Error{errno, fmt::format("index cache {}: {}", dir.string(), std::strerror(errno))};
  const fs::path tmp = tmp_name;
  const std::string tmp_what = "index cache " + tmp.string();
  Status written;  // the first write that failed
  req.sink = [fd = fd.get(), &written, &tmp_what, &where, max_bytes](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset + bytes.size() > max_bytes) {
      if (written) written = Error{EFBIG, fmt::format("{}: {} is larger than {} bytes: not an index this mount takes",
                                                      where.text, kIndexName, max_bytes)};
      return false;
    }
    Status s = pwrite_loop(fd, bytes.data(), bytes.size(), offset, tmp_what);
    if (s) return true;
    if (written) written = std::move(s);
    return false;
  };
  auto [status, result] = client.perform(std::move(req));
  const auto discard = [&] {
    fd.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
  };
  if (!status) {
    discard();
    if (!written) return std::move(written).error();
    return index_error(where, url, status.error(), result);
  }
  if (result.status == 304) {
    discard();
    return FetchedIndex{cached_file(cached_etag), cached_etag};
  }
  // An earlier attempt may have written more than the last one delivered.
  if (::ftruncate(fd.get(), static_cast<off_t>(result.body_bytes)) != 0 || ::fsync(fd.get()) != 0) {
    const int e = errno;
    discard();
    return io_error(e, tmp_what);
  }
  fd.reset();
  const fs::path final_file = cached_file(result.etag);
  std::error_code ec;
  fs::rename(tmp, final_file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Error{EIO, fmt::format("index cache {}: {}", final_file.string(), ec.message())};
  }
  (void)fsync_path(dir);
  // The ETag names the copy for the next open; without one the next open downloads again.
  if (result.etag.empty()) fs::remove(etag_file, ec);
  else (void)write_file_atomically(etag_file, {reinterpret_cast<const uint8_t*>(result.etag.data()), result.etag.size()}, 0600);
  // Older copies of this store's index are of no further use.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(key + "-") && name.ends_with(".sqlite") && entry.path() != final_file) fs::remove(entry.path(), ec);
  }
  return FetchedIndex{final_file, result.etag};
}

// HEADs every record in parallel; an Error naming the missing or short ones (a few of them).
// At most kHeadsQueued requests are handed to the client at a time: an index names as many
// records as it likes, and each queued request holds its URL and signature.
Status check_records(net::HttpClient& client, const net::RemoteLocation& where, const index::Store& store,
                     const std::atomic<bool>* cancel) {
  constexpr std::ptrdiff_t kHeadsQueued = 256;
  const auto records = store.records();
  struct Answer {
    Status status;
    net::HttpResult result;
  };
  std::vector<Answer> answers(records.size());
  std::latch all(static_cast<std::ptrdiff_t>(records.size()));
  std::counting_semaphore<kHeadsQueued> window(kHeadsQueued);
  for (size_t k = 0; k < records.size(); ++k) {
    window.acquire();
    net::HttpRequest req = net::head_object(where, records[k].path);
    req.cancel = cancel;
    req.done = [&answers, &all, &window, k](Status s, const net::HttpResult& r) {
      answers[k] = {std::move(s), r};
      window.release();
      all.count_down();
    };
    client.submit(std::move(req));
  }
  all.wait();

  std::vector<std::string> problems;
  for (size_t k = 0; k < records.size(); ++k) {
    const Answer& a = answers[k];
    const index::Record& rec = records[k];
    if (!a.status && a.result.status == 404) {
      problems.push_back(fmt::format("{} (missing)", rec.path));
    } else if (!a.status && (a.result.status == 401 || a.result.status == 403)) {
      return Error{EACCES, fmt::format("{}: access denied reading {} (HTTP {}){}", where.text, rec.path, a.result.status,
                                       where.sign ? fmt::format(": check the credentials (from {})", where.credentials_from) : "")};
    } else if (!a.status) {
      return Error{EIO, fmt::format("{}: cannot check {}: {}", where.text, rec.path, a.status.error().message)};
    } else if (a.result.content_length != rec.size) {
      problems.push_back(a.result.content_length
                             ? fmt::format("{} ({} bytes, the index says {})", rec.path, *a.result.content_length, rec.size)
                             : fmt::format("{} (no Content-Length)", rec.path));
    }
  }
  if (problems.empty()) return {};
  std::string named;
  for (size_t k = 0; k < std::min(problems.size(), kProblemsNamed); ++k) named += (k ? ", " : "") + problems[k];
  if (problems.size() > kProblemsNamed) named += ", ...";
  return Error{EIO, fmt::format("{}: {} of {} records missing or short: {}; the store is incomplete (upload every record, "
                                "then {} last)",
                                where.text, problems.size(), records.size(), named, kIndexName)};
}

}  // namespace

Status make_private_dir(const fs::path& dir) {
  Result<Fd> fd = open_private_dir(dir, "index cache");
  if (!fd) return std::move(fd).error();
  return {};
}

fs::path index_cache_dir(const StoreOptions& opts) {
  if (!opts.index_cache.empty()) return opts.index_cache;
  if (!opts.disk_cache.empty()) return opts.disk_cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "fidelityfs";
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : "/tmp") / ".cache" / "fidelityfs";
}

Result<RemoteStore> open_remote_store(const net::StoreUrl& url, const StoreOptions& opts, net::HttpOptions http) {
  http.max_in_flight = opts.max_requests;
  http.ca_file = opts.ca_file;
  http.counters = nullptr;
  Result<net::RemoteLocation> where = net::remote_location(url, opts.s3);
  if (!where) return std::move(where).error();

  RemoteStore out;
  {
    // A client of its own, gone (thread joined) before returning: the mount forks after this.
    net::HttpClient client(http);
    Result<FetchedIndex> fetched = fetch_index(client, url, *where, index_cache_dir(opts), opts.cancel, opts.max_index_bytes);
    if (!fetched) return std::move(fetched).error();
    const fs::path* index_file = &fetched->file;
    out.index_etag = fetched->etag;
    auto store = index::Store::open_index(*index_file, url.text, tables_dir(opts));
    if (!store) return std::move(store).error();
    out.store = std::move(store).value();
    Result<std::string> identity = hash_file(*index_file);
    if (!identity) return std::move(identity).error();
    out.identity = std::move(identity).value();
    out.index_file = *index_file;
    if (Status s = check_records(client, *where, *out.store, opts.cancel); !s) return std::move(s).error();
  }
  out.source = std::make_unique<HttpRecordSource>(*out.store, std::move(where).value(), http);
  out.source->cancel_on(opts.cancel);
  return out;
}

}  // namespace fid::storage
