// The daemon's own mount as the daemon reaches it (its listings and lookups through the mount,
// core::KernelCache) and unmounts it: never by its path alone. A path can come to name something
// else: the mount moved (mount --move), another mount over it, a lazy unmount. So the mount is
// known by its device number, each access opens its root afresh and checks it is this mount, and
// nothing is held between accesses (a held descriptor keeps a plain unmount busy).
#pragma once

#include <linux/openat2.h>
#include <sys/types.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace fid::fs {

// A mount of /proc/self/mountinfo.
struct MountEntry {
  int id = 0, parent = 0;
  dev_t dev = 0;
  std::string point;  // unescaped
};
// The mounts of /proc/self/mountinfo (empty if it cannot be read).
std::vector<MountEntry> read_mountinfo();
// Parses mountinfo text; a line it cannot read is skipped (fuzzed: tests/fuzz).
std::vector<MountEntry> parse_mountinfo(std::string_view text);

class OwnMount {
 public:
  explicit OwnMount(std::string mountpoint) : mountpoint_(std::move(mountpoint)) {}
  // The mount answers, as device `dev` (a stat of its root): accesses may start.
  void answers(dev_t dev);
  dev_t device() const { return dev_.load(); }
  const std::string& mountpoint() const { return mountpoint_; }

  // A descriptor of this mount's root for one access, to resolve names beneath with openat2
  // (kResolve). As root it is a detached copy of the mount (open_tree's OPEN_TREE_CLONE: the same
  // kernel caches, but holding it keeps nothing busy, so an unmount from outside succeeds during
  // an access); otherwise an O_PATH descriptor. Found at the mount point, or where mountinfo
  // lists the device now (a moved mount); a root whose device or inode is not this mount's is
  // never used. ENOTCONN: the mount does not answer yet; ESTALE: it is nowhere this daemon sees.
  Result<Fd> open_root() const;

  // Where this mount is now, by mountinfo alone (no access through the mount: it may no longer be
  // answered): `open` at `point` (where it was mounted if it is still there, else where it was
  // moved or bound), `covered` (listed, but another mount is over each of its places), or `gone`
  // (unmounted, lazily or not).
  struct Place {
    enum { gone, covered, open } state = gone;
    std::string point;
  };
  Place place() const;
  const std::string& real_mountpoint() const { return real_mountpoint_; }

  // openat2's resolve flags for every name beneath the root: no symlinks, no other mount, no
  // escape upward.
  static constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

 private:
  Result<Fd> open_root_at(const std::string& point) const;

  const std::string mountpoint_;
  std::string real_mountpoint_;  // set with dev_ (before accesses start)
  std::atomic<dev_t> dev_{0};
  mutable std::atomic<bool> no_clone_{false};  // open_tree refused: O_PATH from now on
};

}  // namespace fid::fs
