// `pack --append` to an s3:// store (s3_jobs.h; docs/FORMAT.md "Appended stores"): the new
// files packed in a scratch folder, their records uploaded under names of this append's own, the
// union index put last with If-Match on the ETag of the index it was made from.
#include <fmt/format.h>
#include <xxhash.h>

#include <cerrno>
#include <random>
#include <regex>
#include <unordered_set>

#include "common/fd.h"
#include "common/posix_io.h"
#include "index/format.h"
#include "net/s3_listing.h"
#include "net/s3_requests.h"
#include "pack/append_index.h"
#include "pack/index_check.h"
#include "pack/s3_jobs.h"
#include "pack/s3_upload.h"
#include "storage/remote_store.h"

namespace fid::pack {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexName = "index.sqlite";

// The 8 hex digits that name the index an append starts from, in its records' names.
std::string base_tag(std::string_view etag) {
  return fmt::format("{:08x}", static_cast<uint32_t>(XXH3_64bits(etag.data(), etag.size())));
}

// records/NNNNNN-BBBBBBBB-RRRRRRRRRRRRRRRR.rec: the record's id, the base tag of the index the
// append started from, and the append's own random tag.
std::string appended_record_path(uint32_t id, const std::string& base, const std::string& own) {
  return fmt::format("{}/{:06d}-{}-{}.rec", index::kRecordDir, id, base, own);
}

// The base tag of a key named as appended_record_path names them; nullopt for any other key.
std::optional<std::string> appended_record_base(const std::string& rel) {
  static const std::regex pattern(R"(records/[0-9]{6,10}-([0-9a-f]{8})-[0-9a-f]{16}\.rec)");
  std::smatch m;
  if (!std::regex_match(rel, m, pattern)) return std::nullopt;
  return m[1].str();
}

std::string random_tag() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", r);
}

net::HttpOptions http_options(const storage::StoreOptions& opts) {
  net::HttpOptions http;
  http.max_in_flight = opts.max_requests;
  http.ca_file = opts.ca_file;
  return http;
}

// The keys under the store's records/ (relative to the store), every page of the listing.
Result<std::vector<std::string>> list_records(net::HttpClient& client, const net::RemoteLocation& where,
                                              const std::atomic<bool>* cancel) {
  net::RemoteLocation bucket = where;
  bucket.base_path = where.bucket_path;
  const std::string store_prefix = where.key_prefix.empty() ? "" : where.key_prefix + "/";
  const std::string prefix = fmt::format("{}{}/", store_prefix, index::kRecordDir);
  std::vector<std::string> out;
  std::string token;
  do {
    auto body = std::make_shared<std::string>();
    net::HttpRequest req = net::list_objects_v2(bucket, prefix, token);
    req.sink = net::answer_sink(body, net::kMaxListingBytes);  // a page of 1000 keys: a few hundred KiB
    req.cancel = cancel;
    auto [listed, result] = client.perform(std::move(req));
    if (!listed) return Error{listed.error().code, fmt::format("{}: cannot list {}: {}", where.text, prefix, listed.error().message)};
    Result<net::ListPage> page = net::parse_list_objects_v2(*body);
    if (!page) return Error{EPROTO, fmt::format("{}: the listing of {} is not understood: {}", where.text, prefix, page.error().message)};
    for (const net::ListedObject& o : page->objects)
      if (o.key.starts_with(prefix)) out.push_back(o.key.substr(store_prefix.size()));
    token = page->truncated ? page->next_token : "";
  } while (!token.empty());
  return out;
}

// The PackDestination of the appended part: its records go up under the append's names (ids
// after the store's), and its index is kept in `index_dir` for the union, not uploaded.
class AppendUpload final : public PackDestination {
 public:
  AppendUpload(S3Upload& upload, const PartRecordPath& name_of, uint32_t first, fs::path index_dir)
      : upload_(upload), name_of_(name_of), next_(first), index_dir_(std::move(index_dir)) {}

  Status add_record(const fs::path& file, const std::string& /*name: the part's*/) override {
    if (Status s = upload_.add_record(file, name_of_(next_++)); !s) return s;
    if (++added_ == 2) stop_here_for_tests("between-records");  // the first one handed over
    return {};
  }
  Status finish(const fs::path& index_file) override {
    std::error_code ec;
    fs::create_directories(index_dir_, ec);
    if (!ec) fs::copy_file(index_file, index_dir_ / index::kIndexFile, fs::copy_options::overwrite_existing, ec);
    if (ec) return Error{ec.value(), fmt::format("{}: {}", (index_dir_ / index::kIndexFile).string(), ec.message())};
    return upload_.finish_records();
  }

 private:
  S3Upload& upload_;
  const PartRecordPath& name_of_;
  uint32_t next_;
  uint32_t added_ = 0;
  fs::path index_dir_;
};

// PUTs `file` as the store's index if the index there still has the ETag `if_match`; the new
// index's ETag. EBUSY when another append changed it first. A 412 is looked into with a HEAD of
// the index: its ETag that of these bytes (this PUT went through on an attempt whose answer was
// lost) is success; still `if_match` means a server that compares ETags without their quotes
// (Ceph RGW 16 does), asked again so.
Result<std::string> commit_index(net::HttpClient& client, const net::RemoteLocation& where, const fs::path& file,
                                 const std::string& if_match, const std::atomic<bool>& cancel) {
  const Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    return io_error(err, file.string());
  }
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) return Error{ec.value(), fmt::format("{}: {}", file.string(), ec.message())};
  // The ETag of these bytes: needed only to settle a 412 or an answer without one, so hashed then.
  const auto ours = [&] { return net::single_put_etag(file.string()); };
  const std::string what = file.string();
  auto put = [&](const std::string& condition) {
    // The first call gives half the body, so that a test can stop the upload between its halves.
    net::BodyReader body = [fd = fd.get(), size, &what](uint64_t offset, std::span<uint8_t> room) -> Result<size_t> {
      if (offset > 0) stop_here_for_tests("index-upload");
      const uint64_t want = std::min<uint64_t>(room.size(), offset == 0 ? std::max<uint64_t>(size / 2, 1) : size - offset);
      return pread_loop(fd, room.data(), want, offset, what);
    };
    net::HttpRequest req = net::put_object(where, kIndexName, size, std::move(body), condition);
    req.cancel = &cancel;
    return client.perform(std::move(req));
  };
  std::string condition = if_match;
  for (bool unquoted_tried = false;;) {
    auto [status, result] = put(condition);
    if (status) return result.etag.empty() ? ours() : Result<std::string>(result.etag);
    if (result.status != 412)
      return Error{status.error().code, fmt::format("{}: cannot put {}: {}", where.text, kIndexName, status.error().message)};
    auto [head, there] = client.perform(net::head_object(where, kIndexName));
    if (head) {
      Result<std::string> mine = ours();
      if (!mine) return std::move(mine).error();
      if (there.etag == *mine) return there.etag;
    }
    const bool quoted = condition.size() >= 2 && condition.front() == '"' && condition.back() == '"';
    if (!head || there.etag != if_match || !quoted || unquoted_tried)
      return Error{EBUSY, fmt::format("{}: the store's index changed while this append ran (another append to it "
                                      "finished first; HTTP 412): nothing of this append is part of the store; "
                                      "append again", where.text)};
    condition = condition.substr(1, condition.size() - 2);
    unquoted_tried = true;
  }
}

// Deletes the records earlier appends left (named for an index other than `etag`'s, which they
// can no longer commit on) that the index does not reference. Best effort: what is left is named
// by inspect and removed by the next append.
void remove_leftovers(net::HttpClient& client, const net::RemoteLocation& where, const std::string& etag,
                      const std::unordered_set<std::string>& referenced) {
  Result<std::vector<std::string>> keys = list_records(client, where, nullptr);
  if (!keys) return;
  const std::string current = base_tag(etag);
  for (const std::string& rel : *keys) {
    const std::optional<std::string> base = appended_record_base(rel);
    if (base && *base != current && !referenced.count(rel)) (void)client.perform(net::delete_object(where, rel));
  }
}

// Removes the scratch folder of an append when it ends, whatever the outcome.
struct ScratchRemoved {
  const fs::path& dir;
  ~ScratchRemoved() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Sums records.size of an index.
Result<uint64_t> record_bytes(const index::SqliteDb& db) {
  Result<index::SqliteStatement> q = db.prepare("SELECT coalesce(sum(size), 0) FROM records");
  if (!q) return std::move(q).error();
  Result<bool> row = q->step();
  if (!row) return std::move(row).error();
  return static_cast<uint64_t>(q->integer(0));
}

}  // namespace

Result<S3AppendTarget> open_s3_append(const net::StoreUrl& url, const storage::StoreOptions& options) {
  Result<ScratchLock> lock = ScratchLock::take(url);
  if (!lock) return std::move(lock).error();
  Result<storage::RemoteStore> store = storage::open_remote_store(url, options);
  if (!store) return std::move(store).error();
  if (store->index_etag.empty())
    return Error{EPROTO, fmt::format("{}: the server gives no ETag for {}: an append could not make its index "
                                     "replace this one only", url.text, kIndexName)};
  S3AppendTarget target{url, options, std::move(lock).value(), scratch_store("append", url), store->index_etag};
  std::error_code ec;
  fs::remove_all(target.scratch, ec);  // what a killed append to the same store left
  fs::create_directories(target.index_dir(), ec);
  if (!ec) fs::copy_file(store->index_file, target.index_dir() / index::kIndexFile, ec);
  if (ec) return Error{ec.value(), fmt::format("{}: {}", target.index_dir().string(), ec.message())};
  return target;
}

Result<AppendReport> append_to_s3(const S3AppendTarget& target, const PackOptions& options,
                                  std::unique_ptr<sources::PackSource> source,
                                  const std::function<void(const PackProgress&)>& progress,
                                  const std::atomic<bool>& cancel) {
  const ScratchRemoved removed{target.scratch};
  Result<std::unique_ptr<index::SqliteDb>> old_db = open_append_index(target.index_dir());
  if (!old_db) return std::move(old_db).error();
  Result<AppendTree> old = read_append_tree(**old_db, target.url.text);
  if (!old) return std::move(old).error();
  const std::string base = base_tag(target.index_etag), own = random_tag();
  const PartRecordPath name_of = [&](uint32_t id) { return appended_record_path(id, base, own); };

  S3UploadOptions up;
  up.cancel = &cancel;
  Result<std::unique_ptr<S3Upload>> upload = S3Upload::create(target.url, target.options, up);
  if (!upload) return std::move(upload).error();
  const fs::path part_index = target.scratch / "part-index";
  AppendUpload destination(**upload, name_of, old->records, part_index);
  PackOptions part = options;
  part.store = target.scratch / "part";
  part.check_listing = [&](const sources::SourceTree& tree) { return refuse_existing(*old, tree, target.url.text, options.replace); };
  Result<PackReport> packed = pack(part, PackIo{std::move(source), &destination}, progress, cancel);
  if (!packed) return std::move(packed).error();
  stop_here_for_tests("records");
  if (cancel) return Error{ECANCELED, "interrupted"};

  Result<std::unique_ptr<index::SqliteDb>> part_db = open_append_index(part_index);
  if (!part_db) return std::move(part_db).error();
  Result<AppendTree> part_tree = read_append_tree(**part_db, part_index.string());
  if (!part_tree) return std::move(part_tree).error();
  Result<uint64_t> new_bytes = record_bytes(**part_db);
  if (!new_bytes) return std::move(new_bytes).error();
  const fs::path union_dir = target.scratch / "union";
  std::error_code ec;
  fs::create_directories(union_dir, ec);
  const fs::path union_index = union_dir / index::kIndexFile;
  if (Status written = write_union_index(**old_db, *old, **part_db, *part_tree, name_of, union_index); !written)
    return std::move(written).error();
  if (Status loads = check_before_commit(union_index, target.url.text, "append"); !loads) return std::move(loads).error();
  stop_here_for_tests("index");
  if (cancel) return Error{ECANCELED, "interrupted"};

  const net::RemoteLocation& where = (*upload)->where();
  net::HttpClient client(http_options(target.options));
  Result<std::string> etag = commit_index(client, where, union_index, target.index_etag, cancel);
  if (!etag) return std::move(etag).error();
  Result<std::unique_ptr<index::SqliteDb>> union_db = open_append_index(union_dir);
  if (union_db)
    if (Result<std::unordered_set<std::string>> referenced = record_paths(**union_db); referenced)
      remove_leftovers(client, where, *etag, *referenced);

  AppendReport report;
  report.pack = std::move(packed).value();
  report.first_record = old->records;
  report.files_before = old->files.size();
  report.replaced = replaced_files(*old, *part_tree);
  report.files_after = report.files_before + part_tree->files.size() - report.replaced;
  report.bytes_written = *new_bytes + fs::file_size(union_index, ec);
  return report;
}

Result<std::vector<std::string>> s3_append_leftovers(const net::StoreUrl& url, const storage::StoreOptions& options,
                                                     const index::Store& store) {
  Result<net::RemoteLocation> where = net::remote_location(url, options.s3);
  if (!where) return std::move(where).error();
  std::unordered_set<std::string> referenced;
  for (const index::Record& r : store.records()) referenced.insert(r.path);
  net::HttpClient client(http_options(options));
  Result<std::vector<std::string>> keys = list_records(client, *where, options.cancel);
  if (!keys) return std::move(keys).error();
  std::vector<std::string> out;
  for (std::string& rel : *keys)
    if (appended_record_base(rel) && !referenced.count(rel)) out.push_back(std::move(rel));
  return out;
}

}  // namespace fid::pack
