#include "pack/temp_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <csignal>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "common/posix_io.h"
#include "index/format.h"
#include "pack/index_check.h"

namespace fid::pack {

namespace fsys = std::filesystem;

namespace {

fid::Error system_error(int code, const std::string& what) {
  return fid::Error{code, fmt::format("{}: {}", what, std::strerror(code))};
}

// Temporary folders of earlier packs of the same target: a leftover whose lock is free (its pack
// was killed, or crashed) is removed; a locked one belongs to a pack that runs now, which is an
// error. Without flock support (some network filesystems) a leftover is removed when the PID in
// its name no longer runs.
fid::Status clear_leftovers(const fsys::path& store, const std::string& tmp_prefix) {
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(store.parent_path(), ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(tmp_prefix, 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + tmp_prefix.size(), &end, 10);
    if (!end || *end != '\0' || pid <= 0) continue;
    Fd fd(::open(e.path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) continue;
    bool stale;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) stale = true;
    else if (errno == EWOULDBLOCK) stale = false;
    else stale = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (stale) {
      fsys::remove_all(e.path(), ec);
      continue;
    }
    return fid::Error{EBUSY, fmt::format("{}: another fidelityfs pack (pid {}) is writing this store into {}; wait "
                                         "for it to finish or stop it, then pack again",
                                         store.string(), pid, e.path().string())};
  }
  return {};
}

}  // namespace

fid::Result<fsys::path> check_store_target(const fsys::path& target) {
  std::error_code ec;
  fsys::path store = fsys::absolute(target, ec);
  if (store.filename().empty()) store = store.parent_path();
  if (fsys::exists(store, ec) && !(fsys::is_directory(store, ec) && fsys::is_empty(store, ec)))
    return fid::Error{EEXIST, fmt::format("{}: already exists and is not an empty folder: pack into a new or empty "
                                          "folder (to replace a store, pack beside it, then swap the folders)", store.string())};
  if (!fsys::is_directory(store.parent_path(), ec))
    return fid::Error{ENOENT, fmt::format("{}: parent folder does not exist", store.parent_path().string())};
  return store;
}

fid::Result<std::unique_ptr<TempStore>> TempStore::begin(const fsys::path& store) {
  const std::string tmp_prefix = fmt::format(".{}.tmp-", store.filename().string());
  if (fid::Status cleared = clear_leftovers(store, tmp_prefix); !cleared) return std::move(cleared).error();
  std::unique_ptr<TempStore> tmp(new TempStore);
  tmp->path_ = store.parent_path() / fmt::format("{}{}", tmp_prefix, ::getpid());
  std::error_code ec;
  fsys::remove_all(tmp->path_, ec);
  if (!fsys::create_directories(tmp->path_ / index::kRecordDir, ec)) {
    return fid::Error{ec ? ec.value() : EEXIST, fmt::format("{}: cannot create: {}", tmp->path_.string(), ec.message())};
  }
  tmp->lock_ = Fd(::open(tmp->path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (tmp->lock_.get() >= 0) (void)::flock(tmp->lock_.get(), LOCK_EX | LOCK_NB);  // best effort (see clear_leftovers)
  return tmp;
}

TempStore::~TempStore() {
  if (!committed_ && !path_.empty()) {
    std::error_code ec;
    fsys::remove_all(path_, ec);
  }
}

fid::Status TempStore::publish_index(const std::string& store, const char* writer) {
  const fsys::path partial = path_ / index::kIndexPartialFile;
  if (fid::Status loads = check_before_commit(partial, store, writer); !loads) return loads;
  if (fid::Status flushed = fsync_path(partial); !flushed) return std::move(flushed).error();
  if (::rename(partial.c_str(), (path_ / index::kIndexFile).c_str()) != 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot rename the index", partial.string()));
  }
  return {};
}

fid::Status TempStore::commit(const fsys::path& store) {
  for (const fsys::path& p : {path_ / index::kRecordDir, path_})
    if (fid::Status flushed = fsync_path(p); !flushed) return std::move(flushed).error();
  if (::rename(path_.c_str(), store.c_str()) != 0) {
    const int err = errno;
    return system_error(err, fmt::format("{}: cannot move the finished store into place", store.string()));
  }
  committed_ = true;
  // Committed: the store is complete under its name; a failure to flush the parent folder only
  // means the rename may not survive a power loss, so it does not fail the pack.
  if (Fd fd(::open(store.parent_path().c_str(), O_RDONLY | O_CLOEXEC)); fd.get() >= 0) (void)::fsync(fd.get());
  return {};
}

}  // namespace fid::pack
