"""Levels of files and folders on a mount, through the `user.fidelity.*` extended attributes
(docs/MOUNT.md, "Levels" and "Extended attributes").

    from fidelityfs.levels import set_level, get_level, clear_level, level_count
    set_level("/mnt/in/train", 3)          # the whole subtree, from the next open on
    set_level("/mnt/in/train/a/1.jpg", "full")
    get_level("/mnt/in/train/a/1.jpg")     # -> 10 (the effective level, as an int)
    clear_level("/mnt/in/train/a/1.jpg")   # -> True: the file follows its folder again (3)
    level_count("/mnt/in")                 # -> 10, the store's L
    set_encoding("/mnt/in/train", "sequential")  # levels read as one sequential scan, same pixels

Needs only the standard library (os.setxattr and friends: Linux). Overrides live in the daemon's
memory and end with the mount.
"""
import errno
import os

from .stats import find_mount_root, read_config

SCAN_GROUP = "user.fidelity.scan_group"
ENCODING = "user.fidelity.encoding"
ENCODINGS = ("progressive", "sequential")

__all__ = ["SCAN_GROUP", "ENCODING", "set_level", "get_level", "clear_level", "level_count", "sizes", "kind",
           "set_encoding", "get_encoding", "clear_encoding"]


def _value(k):
    if isinstance(k, str):
        if k == "full":
            return b"full"
        if not k.isdigit():
            raise ValueError(f"level {k!r}: expected 1..L or 'full'")
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"level {k!r}: expected 1..L or 'full'")
    return str(k).encode()


def set_level(path, k):
    """Sets the level override of a JPEG file or of a folder (its whole subtree): `k` is 1..L or
    "full". The mount refuses a level above L, and any level on l3 and blob files (OSError
    EINVAL), and anything under /.fidelity (EPERM)."""
    os.setxattr(path, SCAN_GROUP, _value(k))


def get_level(path):
    """The effective level (an int) of a JPEG file: its override, else its nearest folder's, else
    the config rule or the mount default. Of a folder: the nearest folder override on it or
    above, else the mount default (config rules apply to files and are not included). Under
    /.fidelity/sg/K: K. None for files that have no levels (l3 and blob files)."""
    try:
        v = os.getxattr(path, SCAN_GROUP)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise
    v = v.rstrip(b"\0\n").decode()
    return level_count(path) if v == "full" else int(v)


def _remove(path, name):
    """Removes an override; True if there was one, False if there was none."""
    try:
        os.removexattr(path, name)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return False
        raise
    return True


def clear_level(path):
    """Removes the override of a file or folder, so that it follows its folders, the rules and the
    default again. True if there was one, False if there was none."""
    return _remove(path, SCAN_GROUP)


def set_encoding(path, encoding):
    """Sets how a JPEG file, or every JPEG below a folder, reads: "progressive" (as stored) or
    "sequential" (its level as one sequential scan with the same pixels, docs/MOUNT.md "Sequential
    levels"). The mount refuses it on l3 and blob files (OSError EINVAL) and under /.fidelity
    (EPERM)."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding {encoding!r}: expected 'progressive' or 'sequential'")
    os.setxattr(path, ENCODING, encoding.encode())


def get_encoding(path):
    """The effective encoding of a JPEG file or a folder ("progressive" or "sequential"); None for
    files that have no levels."""
    try:
        return os.getxattr(path, ENCODING).rstrip(b"\0\n").decode()
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def clear_encoding(path):
    """Removes the encoding override of a file or folder. True if there was one."""
    return _remove(path, ENCODING)


def level_count(path):
    """The store's number of levels L (10 for stores `pack` writes); `path` is anywhere in the
    mount."""
    return int(read_config(path)["levels"])


def sizes(path):
    """A file's size at levels 1..L (a list of L ints; one size for l3 and blob files)."""
    return [int(x) for x in os.getxattr(path, "user.fidelity.bytes").decode().split(",")]


def kind(path):
    """A file's kind: "jpeg", "l3" or "blob"."""
    return os.getxattr(path, "user.fidelity.kind").decode()
