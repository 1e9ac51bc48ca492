// See append.h.
#include "pack/append.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fmt/format.h>
#include <memory>
#include <optional>
#include <string>

#include "common/fd.h"
#include "common/numbers.h"
#include "common/posix_io.h"
#include "index/format.h"
#include "index/sqlite_db.h"
#include "index/store.h"
#include "pack/append_index.h"
#include "pack/index_check.h"

namespace fid::pack {

namespace fsys = std::filesystem;

namespace {

constexpr const char* kPartDir = ".append-part";

// Record files named by id (NNNNNN.rec) at or after `first` in records/.
std::vector<fsys::path> records_from(const fsys::path& store, uint64_t first) {
  std::vector<fsys::path> out;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(store / index::kRecordDir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 5 || name.substr(name.size() - 4) != ".rec") continue;
    const std::optional<uint64_t> id = parse_u64(name.substr(0, name.size() - 4));
    if (id && *id >= first) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Removes what an interrupted append left (the caller holds the store's lock, so none is running).
void clear_leftovers(const fsys::path& store, uint64_t records) {
  std::error_code ec;
  for (const std::string& rel : append_leftovers(store, records)) fsys::remove_all(store / rel, ec);
}

// Moves the part's records into the store after its last one; returns their bytes.
fid::Result<uint64_t> move_records(const fsys::path& part, const fsys::path& store, uint32_t first) {
  fid::Result<std::unique_ptr<index::SqliteDb>> db = open_append_index(part);
  if (!db) return std::move(db).error();
  fid::Result<index::SqliteStatement> q = (*db)->prepare("SELECT id, path, size FROM records ORDER BY id");
  if (!q) return std::move(q).error();
  uint64_t bytes = 0;
  fid::Status moved = q->each_row([&]() -> fid::Status {
    const fsys::path from = part / q->text(1);
    const fsys::path to = store / index::record_path(first + static_cast<uint32_t>(q->integer(0)));
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int err = errno;
      return io_error(err, fmt::format("{}: cannot move into the store", from.string()));
    }
    bytes += static_cast<uint64_t>(q->integer(2));
    if (q->integer(0) == 0) stop_here_for_tests("between-records");  // after the first record moved
    return {};
  });
  if (!moved) return std::move(moved).error();
  return bytes;
}

fid::Result<AppendReport> append_locked(const PackOptions& opt, PackIo io,
                                        const std::function<void(const PackProgress&)>& progress,
                                        const std::atomic<bool>& cancel, const fsys::path& store) {
  fid::Result<std::unique_ptr<index::SqliteDb>> old_db = open_append_index(store);
  if (!old_db) return std::move(old_db).error();
  // A video stream's GOPs lie in its first frames' files, which an append's union does not carry over.
  fid::Result<bool> streams = (*old_db)->has_table("video_streams");
  if (!streams) return std::move(streams).error();
  if (*streams || opt.video_streams)
    return fid::Error{EINVAL, fmt::format("{}: --append does not take videos kept as streams (--video-streams); "
                                          "pack the store again", store.string())};
  fid::Result<AppendTree> old = read_append_tree(**old_db, store.string());
  if (!old) return std::move(old).error();
  clear_leftovers(store, old->records);

  const fsys::path part_dir = store / kPartDir;
  PackOptions part = opt;
  part.store = part_dir;
  part.writes_into = store;
  part.check_listing = [&](const sources::SourceTree& tree) { return refuse_existing(*old, tree, store.string(), opt.replace); };
  fid::Result<PackReport> packed = pack(part, std::move(io), progress, cancel);
  if (!packed) return std::move(packed).error();
  AppendReport report;
  report.pack = std::move(packed).value();
  report.first_record = old->records;
  report.files_before = old->files.size();
  auto fail = [&](fid::Error e) -> fid::Result<AppendReport> {
    clear_leftovers(store, old->records);
    return e;
  };
  stop_here_for_tests("records");
  if (cancel) return fail(fid::Error{ECANCELED, "interrupted"});

  fid::Result<std::unique_ptr<index::SqliteDb>> part_db = open_append_index(part_dir);
  if (!part_db) return fail(std::move(part_db).error());
  fid::Result<AppendTree> part_tree = read_append_tree(**part_db, part_dir.string());
  if (!part_tree) return fail(std::move(part_tree).error());
  fid::Result<uint64_t> moved = move_records(part_dir, store, old->records);
  if (!moved) return fail(std::move(moved).error());
  if (fid::Status flushed = fsync_path(store / index::kRecordDir); !flushed) return fail(std::move(flushed).error());
  const fsys::path partial = store / index::kIndexPartialFile;
  if (fid::Status written = write_union_index(**old_db, *old, **part_db, *part_tree, index::record_path, partial); !written)
    return fail(std::move(written).error());
  if (fid::Status loads = check_before_commit(partial, store.string(), "append"); !loads) return fail(std::move(loads).error());
  if (fid::Status flushed = fsync_path(partial); !flushed) return fail(std::move(flushed).error());
  stop_here_for_tests("index");
  if (cancel) return fail(fid::Error{ECANCELED, "interrupted"});
  if (::rename(partial.c_str(), (store / index::kIndexFile).c_str()) != 0) {
    const int err = errno;
    return fail(io_error(err, partial.string() + ": cannot rename the index"));
  }
  (void)fsync_path(store);  // committed; a lost flush of the folder only risks the rename on power loss
  std::error_code ec;
  fsys::remove_all(part_dir, ec);
  report.replaced = replaced_files(*old, *part_tree);
  report.files_after = report.files_before + part_tree->files.size() - report.replaced;
  report.bytes_written = *moved + fsys::file_size(store / index::kIndexFile, ec);
  return report;
}

}  // namespace

std::vector<std::string> append_leftovers(const fsys::path& store, uint64_t records) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(store, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kPartDir || name.rfind(fmt::format(".{}.tmp-", kPartDir), 0) == 0 || name == index::kIndexPartialFile)
      out.push_back(name);
  }
  for (const fsys::path& p : records_from(store, records)) out.push_back(fsys::relative(p, store, ec).string());
  std::sort(out.begin(), out.end());
  return out;
}

fid::Result<AppendReport> append(const PackOptions& opt, PackIo io,
                                 const std::function<void(const PackProgress&)>& progress,
                                 const std::atomic<bool>& cancel) {
  std::error_code ec;
  const fsys::path store = fsys::absolute(opt.store, ec);
  const Fd lock(::open(store.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (lock.get() < 0) {
    const int err = errno;
    return io_error(err, store.string() + ": cannot open the store");
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return fid::Error{EBUSY, fmt::format("{}: another fidelityfs append is writing this store; wait for it to "
                                           "finish, then append again", store.string())};
    const int err = errno;
    return io_error(err, store.string() + ": cannot lock the store");
  }
  return append_locked(opt, std::move(io), progress, cancel, store);
}

}  // namespace fid::pack
