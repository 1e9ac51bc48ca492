// See own_mount.h.
#include "fs/own_mount.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/numbers.h"

namespace fid::fs {

namespace {

// mountinfo writes space, tab, newline and backslash in a path as \ and three octal digits.
std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' &&
        s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The next space-separated field of `line` from `at`.
std::string_view field(std::string_view line, size_t& at) {
  while (at < line.size() && line[at] == ' ') ++at;
  const size_t start = at;
  while (at < line.size() && line[at] != ' ') ++at;
  return line.substr(start, at - start);
}

template <typename T>
bool whole(std::string_view s, T& out) {
  auto v = parse_u64(s);
  if (!v || *v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
  out = static_cast<T>(*v);
  return true;
}

// The device and inode of an open root, read without a request to the daemon (cached attributes).
bool is_mount_root(int fd, dev_t dev) {
  struct statx st {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &st) != 0) return false;
  return ::makedev(st.stx_dev_major, st.stx_dev_minor) == dev && st.stx_ino == 1;  // FUSE_ROOT_ID
}

}  // namespace

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    // "36 35 98:0 /root /mnt/point options ..."
    size_t at = 0;
    MountEntry e;
    const std::string_view id = field(line, at), parent = field(line, at), dev = field(line, at);
    (void)field(line, at);  // the root of the mount within its filesystem
    const std::string_view point = field(line, at);
    const size_t colon = dev.find(':');
    unsigned major = 0, minor = 0;
    if (point.empty() || colon == std::string_view::npos || !whole(id, e.id) || !whole(parent, e.parent) ||
        !whole(dev.substr(0, colon), major) || !whole(dev.substr(colon + 1), minor))
      continue;
    e.dev = ::makedev(major, minor);
    e.point = unescape(point);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<MountEntry> read_mountinfo() {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  return parse_mountinfo(text.str());
}

void OwnMount::answers(dev_t dev) {
  char real[PATH_MAX];
  real_mountpoint_ = ::realpath(mountpoint_.c_str(), real) ? real : mountpoint_;
  dev_.store(dev);
}

Result<Fd> OwnMount::open_root_at(const std::string& point) const {
  const dev_t dev = dev_.load();
  if (!no_clone_.load(std::memory_order_relaxed)) {
    Fd clone(::open_tree(AT_FDCWD, point.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_NO_AUTOMOUNT));
    if (clone.get() >= 0) {
      if (is_mount_root(clone.get(), dev)) return clone;
      return Error{ESTALE, fmt::format("{} is no longer this mount", point)};
    }
    if (errno != EPERM && errno != ENOSYS && errno != EINVAL)
      return Error{errno, fmt::format("{}: {}", point, std::strerror(errno))};
    no_clone_.store(true, std::memory_order_relaxed);  // not root: a descriptor of the mount itself
  }
  Fd root(::open(point.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (root.get() < 0) return Error{errno, fmt::format("{}: {}", point, std::strerror(errno))};
  if (is_mount_root(root.get(), dev)) return root;
  return Error{ESTALE, fmt::format("{} is no longer this mount", point)};
}

Result<Fd> OwnMount::open_root() const {
  if (dev_.load() == 0) return Error{ENOTCONN, "the mount does not answer yet"};
  Result<Fd> root = open_root_at(mountpoint_);
  if (root.ok()) return root;
  // Moved: where mountinfo lists this device now, if anywhere (checked the same way).
  for (const MountEntry& m : read_mountinfo()) {
    if (m.dev != dev_.load() || m.point == real_mountpoint_) continue;
    if (Result<Fd> moved = open_root_at(m.point); moved.ok()) return moved;
  }
  return Error{ESTALE, fmt::format("the mount is no longer at {} ({})", mountpoint_, root.error().message)};
}

OwnMount::Place OwnMount::place() const {
  const dev_t dev = dev_.load();
  if (dev == 0) return {};
  const std::vector<MountEntry> mounts = read_mountinfo();
  Place found;
  for (const MountEntry& m : mounts) {
    if (m.dev != dev) continue;
    bool covered = false;  // another mount on the same point, over this one
    for (const MountEntry& o : mounts) covered = covered || (o.parent == m.id && o.point == m.point);
    if (covered) {
      if (found.state == Place::gone) found.state = Place::covered;
      continue;
    }
    if (m.point == real_mountpoint_) return {Place::open, m.point};  // before a bind of it elsewhere
    if (found.state != Place::open) found = {Place::open, m.point};
  }
  return found;
}

}  // namespace fid::fs
