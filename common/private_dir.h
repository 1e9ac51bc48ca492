// The folders a mount keeps its caches in (the tables files, the disk cache of record prefixes,
// a remote store's index). The daemon often runs as root with allow_other on a machine shared
// with other local users, so a cache folder must be one that no other user can write to:
// otherwise a planted file or symbolic link could feed the mount forged tables, or have root
// write, touch or delete files elsewhere. Folders made here are 0700 whatever the umask; the
// returned descriptor is what every file in the folder is then opened, renamed and removed
// relative to (openat with O_NOFOLLOW), so that no path is looked up again.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace fid {

namespace private_dir_detail {

inline std::string octal_mode(mode_t m) {
  std::string s = "0000";
  for (int i = 3; i >= 0; --i, m >>= 3) s[static_cast<size_t>(i)] = static_cast<char>('0' + (m & 7));
  return s;
}

inline Error refused(std::string_view what, const std::filesystem::path& dir, const std::string& why) {
  return Error{EPERM, std::string(what) + " " + dir.string() + ": " + why + "; refusing to use it"};
}

inline Error failed(std::string_view what, const std::filesystem::path& dir, int err) {
  return Error{err, std::string(what) + " " + dir.string() + ": " + std::strerror(err)};
}

// A symbolic link is followed only if this user or root made it (what fs.protected_symlinks
// enforces in sticky folders, here everywhere).
inline Status check_link(std::string_view what, const std::filesystem::path& shown, int parent, const char* name) {
  struct stat st {};
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(st.st_mode)) return {};
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return refused(what, shown, "a symbolic link owned by uid " + std::to_string(st.st_uid));
  return {};
}

// Opens (making it 0700 if it is missing) the folder `name` in `parent`, then checks it: owned
// by this user or root, and writable by no one else unless sticky (/tmp-like: others cannot
// remove or rename what is not theirs). A folder of this user's is made 0700.
inline Result<Fd> open_checked(std::string_view what, const std::filesystem::path& shown, int parent, const char* name,
                               bool follow, bool create) {
  Fd fd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW)));
  if (fd.get() < 0 && errno == ENOENT && create) {
    if (::mkdirat(parent, name, 0700) != 0 && errno != EEXIST) return failed(what, shown, errno);
    fd = Fd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  }
  if (fd.get() < 0) {
    const int err = errno;
    struct stat st {};
    if (!follow && (err == ELOOP || err == ENOTDIR) && ::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode))
      return refused(what, shown, "a symbolic link");
    return failed(what, shown, err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return failed(what, shown, errno);
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return refused(what, shown, "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                                    std::to_string(me) + ") or root");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return refused(what, shown, "writable by other users (mode " + octal_mode(st.st_mode & 07777) +
                                    ") without the sticky bit");
  // Ours: private, whatever the umask made it or an earlier version left.
  if (st.st_uid == me && (st.st_mode & 07777) != 0700 && !(st.st_mode & S_ISVTX) && ::fchmod(fd.get(), 0700) != 0)
    return failed(what, shown, errno);
  return fd;
}

}  // namespace private_dir_detail

// Opens the cache folder `dir` (given by the user or derived from $HOME), making it and any
// missing parents 0700 if `create`. Symbolic links in the path are followed only when owned by this user or
// root. An Error names `what` ("disk cache", ...), the folder and the cause; a folder that exists
// but may not be used is EPERM and says "refusing to use it".
inline Result<Fd> open_private_dir(const std::filesystem::path& dir, std::string_view what, bool create = true) {
  namespace pd = private_dir_detail;
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(dir, ec).lexically_normal();
  if (ec) return pd::failed(what, dir, ec.value());
  std::vector<std::filesystem::path> parts;
  for (const auto& part : abs.relative_path())
    if (!part.empty()) parts.push_back(part);
  if (parts.empty()) return pd::refused(what, dir, "the root folder");
  // Parents are opened O_PATH: walking through a folder needs only its search permission.
  Fd at(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (at.get() < 0) return pd::failed(what, dir, errno);
  std::filesystem::path walked = "/";
  for (size_t i = 0;; ++i) {
    const char* name = parts[i].c_str();
    walked /= parts[i];
    if (Status s = pd::check_link(what, walked, at.get(), name); !s) return std::move(s).error();
    if (i + 1 == parts.size()) return pd::open_checked(what, dir, at.get(), name, /*follow=*/true, create);
    // A parent: made 0700 if missing, otherwise used as it is (the user's $HOME, /tmp, ...).
    Fd next(::openat(at.get(), name, O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (next.get() < 0 && errno == ENOENT && create) {
      if (::mkdirat(at.get(), name, 0700) != 0 && errno != EEXIST) return pd::failed(what, dir, errno);
      (void)::fchmodat(at.get(), name, 0700, AT_SYMLINK_NOFOLLOW);  // whatever the umask
      next = Fd(::openat(at.get(), name, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    }
    if (next.get() < 0) return pd::failed(what, dir, errno);
    at = std::move(next);
  }
}

// Opens the folder `name` inside a cache folder (a store's entries, the tables), making it 0700;
// never through a symbolic link. `shown` is its path, for messages.
inline Result<Fd> open_private_subdir(int parent, const std::string& name, const std::filesystem::path& shown,
                                      std::string_view what) {
  return private_dir_detail::open_checked(what, shown, parent, name.c_str(), /*follow=*/false, /*create=*/true);
}

// Opens, creating it (O_EXCL: never an existing file or a link) with mode 0600 whatever the umask,
// the file `name` in the folder `dir`. -1 with errno set if it cannot.
inline int create_private_file(int dir, const char* name, int flags = O_WRONLY) {
  const int fd = ::openat(dir, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0 && ::fchmod(fd, 0600) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlinkat(dir, name, 0);
    errno = err;
    return -1;
  }
  return fd;
}

// The names in the folder `dir` (".", ".." left out); empty if it cannot be listed. Lists a
// duplicate of the descriptor, from the start, so `dir` itself is left as it was.
inline std::vector<std::string> names_in(int dir) {
  std::vector<std::string> out;
  Fd listing(::dup(dir));
  DIR* d = listing.get() >= 0 ? ::fdopendir(listing.get()) : nullptr;
  if (!d) return out;
  listing.release();  // the DIR owns it now
  ::rewinddir(d);     // the descriptor's position is shared with `dir`'s
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

}  // namespace fid
