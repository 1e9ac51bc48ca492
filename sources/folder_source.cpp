#include "sources/folder_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "common/fd.h"
#include "common/posix_io.h"

namespace fid::sources {

namespace fsys = std::filesystem;

namespace {

int64_t mtime_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::string join_rel(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "/" + name;
}


// The folder's entry names sorted bytewise, or the reason it cannot be listed.
fid::Result<std::vector<std::string>> sorted_names(const fsys::path& abs) {
  DIR* d = ::opendir(abs.c_str());
  if (!d) {
    const int err = errno;
    return fid::Error{err, fmt::format("cannot list folder: {}", std::strerror(err))};
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    names.push_back(std::move(n));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Depth-first, children sorted bytewise, symlinks followed, loops cut: a parent's id is always
// smaller than its children's. Fails only when the listing cannot be kept (ENOMEM, the message
// the reason only).
fid::Status walk(SourceTree& tree, const fsys::path& abs, uint32_t dir_id, FolderIds& ancestors,
                 const FolderIds& excluded, const std::atomic<bool>& cancel) {
  if (cancel) return {};
  fid::Result<std::vector<std::string>> names = sorted_names(abs);
  if (!names) {
    tree.skipped.emplace_back(tree.dirs[dir_id].rel + "/", names.error().message);
    return {};
  }
  const std::string parent_rel = tree.dirs[dir_id].rel;
  for (const std::string& n : *names) {
    fsys::path child = abs / n;
    std::string rel = join_rel(parent_rel, n);
    if (dir_id == 0 && n == ".fidelity") {
      tree.skipped.emplace_back(rel, "name reserved for the mount's control folder");
      continue;
    }
    struct stat st {};
    if (::stat(child.c_str(), &st) != 0) {
      tree.skipped.emplace_back(rel, fmt::format("cannot stat: {}", std::strerror(errno)));
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      const auto is_this = [&](const auto& a) { return a.first == st.st_dev && a.second == st.st_ino; };
      if (std::any_of(ancestors.begin(), ancestors.end(), is_this)) {
        tree.skipped.emplace_back(rel + "/", "symlink loop (folder is its own ancestor)");
        continue;
      }
      if (std::any_of(excluded.begin(), excluded.end(), is_this)) {
        tree.skipped.emplace_back(rel + "/", "the store being written (reached through a symlink)");
        continue;
      }
      auto id = static_cast<uint32_t>(tree.dirs.size());
      tree.dirs.push_back(SourceDir{dir_id, n, rel, mtime_of(st)});
      ancestors.emplace_back(st.st_dev, st.st_ino);
      if (fid::Status walked = walk(tree, child, id, ancestors, excluded, cancel); !walked) return walked;
      ancestors.pop_back();
    } else if (S_ISREG(st.st_mode)) {
      if (static_cast<uint64_t>(st.st_size) > kMaxSourceFileBytes) {
        tree.skipped.emplace_back(rel, "larger than 4 GiB");
        continue;
      }
      if (fid::Status added = tree.files.add(dir_id, n, static_cast<uint32_t>(st.st_size)); !added) return added;
      tree.bytes += static_cast<uint64_t>(st.st_size);
    } else {
      tree.skipped.emplace_back(rel, "not a regular file or folder");
    }
  }
  return {};
}

}  // namespace

FolderIds folder_ids(std::initializer_list<fsys::path> folders) {
  FolderIds out;
  for (const fsys::path& f : folders) {
    struct stat st {};
    if (!f.empty() && ::stat(f.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.emplace_back(st.st_dev, st.st_ino);
  }
  return out;
}

fid::Result<SourceTree> FolderSource::list(const std::atomic<bool>& cancel) {
  SourceTree tree;
  struct stat st {};
  ::stat(root_.c_str(), &st);
  tree.dirs.push_back(SourceDir{0, "", "", mtime_of(st)});
  FolderIds ancestors{{st.st_dev, st.st_ino}};
  if (fid::Status walked = walk(tree, root_, 0, ancestors, excluded_, cancel); !walked)
    return fid::Error{walked.error().code, fmt::format("{}: cannot list: {}", root_.string(), walked.error().message)};
  return tree;
}

fid::Result<SourceBytes> FolderSource::read(const SourceTree& tree, uint32_t i) const {
  const fsys::path p = root_ / tree.rel(i);
  Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME));
  if (fd.get() < 0 && errno == EPERM) fd = Fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    return fid::Error{err, fmt::format("cannot open: {}", std::strerror(err))};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) > kMaxSourceFileBytes)
    return fid::Error{EFBIG, "cannot stat or larger than 4 GiB"};
  SourceBytes out;
  out.mtime_ns = mtime_of(st);
  std::vector<uint8_t>& bytes = out.bytes;
  bytes.resize(static_cast<size_t>(st.st_size));
  // Up to the end of the file, which may have grown since the fstat.
  size_t done = 0;
  for (;;) {
    if (done == bytes.size()) bytes.resize(bytes.size() + 65536);
    fid::Result<uint64_t> n = pread_loop(fd.get(), bytes.data() + done, bytes.size() - done, done, "read failed");
    if (!n) return std::move(n).error();
    done += static_cast<size_t>(*n);
    if (done < bytes.size()) break;  // the end of the file
  }
  bytes.resize(done);
  return out;
}

}  // namespace fid::sources
