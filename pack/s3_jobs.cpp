#include "pack/s3_jobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "net/s3_requests.h"
#include "pack/s3_upload.h"
#include "storage/remote_store.h"

namespace fid::pack {

namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// A file name part for `url`: its characters that are safe in one, then a hash of the whole, so
// that URLs differing only in what is replaced or cut get names of their own.
std::string url_tag(const net::StoreUrl& url) {
  std::string tag;
  for (char c : url.text.substr(0, 120)) tag += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return fmt::format("{}-{:016x}", tag, XXH3_64bits(url.text.data(), url.text.size()));  // stable across builds
}

// A source whose listing, once it succeeds, prepares the s3:// store (S3Upload::prepare_target,
// which clears a store there): a source that cannot be listed leaves that store as it was, and
// the store is still checked writable before any file is packed.
class PrepareTargetAfterListing final : public sources::PackSource {
 public:
  PrepareTargetAfterListing(std::unique_ptr<sources::PackSource> source, S3Upload& target)
      : source_(std::move(source)), target_(target) {}
  Result<sources::SourceTree> list(const std::atomic<bool>& cancel) override {
    Result<sources::SourceTree> listed = source_->list(cancel);
    if (!listed || cancel) return listed;
    if (Status ready = target_.prepare_target(); !ready) return std::move(ready).error();
    return listed;
  }
  Result<sources::SourceBytes> read(const sources::SourceTree& tree, uint32_t i) const override { return source_->read(tree, i); }
  std::optional<std::vector<uint32_t>> stream_order() const override { return source_->stream_order(); }
  void read_only(std::vector<bool> files) override { source_->read_only(std::move(files)); }
  void will_read(const std::vector<uint32_t>& order) override { source_->will_read(order); }
  bool read_errors_fail() const override { return source_->read_errors_fail(); }

 private:
  std::unique_ptr<sources::PackSource> source_;
  S3Upload& target_;
};

// Opens the part at `url` (its index downloaded, every record checked) and puts its index at
// dir/index.sqlite; where its objects are, for the copies.
Result<net::RemoteLocation> fetch_part(const net::StoreUrl& url, const storage::StoreOptions& opts,
                                           const fs::path& dir) {
  Result<storage::RemoteStore> part = storage::open_remote_store(url, opts);
  if (!part) return std::move(part).error();
  for (const index::Record& r : part->store->records())
    if (r.size > net::kMaxCopySize)
      return Error{EFBIG, fmt::format("{}: {} is {} bytes, more than one server-side copy takes (5 GiB): pack "
                                      "with smaller --record-bytes", url.text, r.path, r.size)};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::create_hard_link(part->index_file, dir / "index.sqlite", ec);
  if (ec) {  // the index cache on another filesystem
    ec.clear();
    fs::copy_file(part->index_file, dir / "index.sqlite", fs::copy_options::overwrite_existing, ec);
  }
  if (ec) return Error{ec.value(), fmt::format("{}: {}", (dir / "index.sqlite").string(), ec.message())};
  return net::remote_location(url, opts.s3);
}

Result<MergeReport> merge_in(const fs::path& scratch, const std::vector<net::StoreUrl>& urls,
                             const storage::StoreOptions& opts, const std::atomic<bool>& cancel) {
  std::vector<fs::path> part_dirs;
  std::vector<net::RemoteLocation> parts;
  MergeIo io;
  for (size_t k = 0; k + 1 < urls.size(); ++k) {
    part_dirs.push_back(scratch / fmt::format("part-{}", k));
    Result<net::RemoteLocation> where = fetch_part(urls[k], opts, part_dirs.back());
    if (!where) return std::move(where).error();
    parts.push_back(std::move(where).value());
    io.part_names.push_back(urls[k].text);
    if (cancel) return Error{ECANCELED, "interrupted"};
  }
  // Refused parts must leave the target as it is: opening the upload clears it.
  if (Status fit = check_merge_parts(part_dirs, io); !fit) return std::move(fit).error();
  S3UploadOptions up;
  up.cancel = &cancel;
  Result<std::unique_ptr<S3Upload>> upload = S3Upload::open(urls.back(), opts, up);
  if (!upload) return std::move(upload).error();
  io.place_record = [&](size_t part, const std::string& from, const std::string& to) {
    return (*upload)->copy_record(parts.at(part), from, to);
  };
  io.destination = upload->get();
  return merge(part_dirs, scratch / "store", cancel, io);
}

}  // namespace

fs::path scratch_store(std::string_view command, const net::StoreUrl& url) {
  return temp_dir() / fmt::format("fidelityfs-{}-{}", command, url_tag(url));
}

Result<ScratchLock> ScratchLock::take(const net::StoreUrl& url) {
  const fs::path file = temp_dir() / fmt::format("fidelityfs-{}.lock", url_tag(url));
  // The holder removes the file before it lets go: a lock taken on a file no longer at the path
  // (or another file there now) is taken again on the one there.
  for (;;) {
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd.get() < 0)
      return Error{errno, fmt::format("{}: cannot create the lock file {}: {}", url.text, file.string(), std::strerror(errno))};
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK)
        return Error{EBUSY, fmt::format("{}: another pack, merge, relayout or append to this store is running (it holds {})", url.text,
                                        file.string())};
      return Error{errno, fmt::format("{}: cannot lock {}: {}", url.text, file.string(), std::strerror(errno))};
    }
    struct stat held {}, there {};
    if (::fstat(fd.get(), &held) == 0 && ::stat(file.c_str(), &there) == 0 && held.st_dev == there.st_dev &&
        held.st_ino == there.st_ino)
      return ScratchLock(file, std::move(fd));
  }
}

ScratchLock::~ScratchLock() {
  if (fd_.get() >= 0) (void)::unlink(file_.c_str());  // before the close lets go of the lock
}

Result<PackReport> pack_to_s3(const PackOptions& options, std::unique_ptr<sources::PackSource> source,
                              const net::StoreUrl& url, const storage::StoreOptions& store_options,
                              const std::function<void(const PackProgress&)>& progress, const std::atomic<bool>& cancel) {
  Result<ScratchLock> lock = ScratchLock::take(url);
  if (!lock) return std::move(lock).error();
  S3UploadOptions up;
  up.cancel = &cancel;
  Result<std::unique_ptr<S3Upload>> upload = S3Upload::create(url, store_options, up);
  if (!upload) return std::move(upload).error();
  PackIo io;
  io.source = std::make_unique<PrepareTargetAfterListing>(source ? std::move(source) : local_source(options), **upload);
  io.destination = upload->get();
  return pack(options, std::move(io), progress, cancel);
}

Result<MergeReport> merge_on_s3(const std::vector<net::StoreUrl>& urls, const storage::StoreOptions& store_options,
                                const std::atomic<bool>& cancel) {
  Result<ScratchLock> lock = ScratchLock::take(urls.back());
  if (!lock) return std::move(lock).error();
  const fs::path scratch = scratch_store("merge", urls.back());
  std::error_code ec;
  fs::remove_all(scratch, ec);  // what a killed merge to the same store left
  Result<MergeReport> merged = merge_in(scratch, urls, store_options, cancel);
  fs::remove_all(scratch, ec);
  return merged;
}

Result<RelayoutReport> relayout_to_s3(const index::Store& store, index::StoreLayout layout, RelayoutIo io,
                                      const net::StoreUrl& url, const storage::StoreOptions& store_options,
                                      const std::function<void(uint64_t, uint64_t)>& progress,
                                      const std::atomic<bool>& cancel) {
  if (Status allowed = relayout_allowed(store); !allowed) return std::move(allowed).error();  // before the target is touched
  Result<ScratchLock> lock = ScratchLock::take(url);
  if (!lock) return std::move(lock).error();
  S3UploadOptions up;
  up.cancel = &cancel;
  Result<std::unique_ptr<S3Upload>> upload = S3Upload::open(url, store_options, up);
  if (!upload) return std::move(upload).error();
  io.destination = upload->get();
  return relayout(store, layout, scratch_store("relayout", url), io, progress, cancel);
}

}  // namespace fid::pack
