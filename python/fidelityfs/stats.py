"""The mount's control files: where a mount's root is, and its `stats` and `config` JSON.

    from fidelityfs.stats import read_stats, read_config, find_mount_root
    root = find_mount_root("/mnt/in/train/n01440764")   # -> "/mnt/in"
    s = read_stats("/mnt/in/train")                     # any path inside the mount
    s["cache"]["used"], read_config(root)["levels"]

Needs only the standard library. Both files are snapshots: every call reads current values
(docs/MOUNT.md, "The control folder").
"""
import json
import os

CONTROL = ".fidelity"


def find_mount_root(path):
    """The nearest ancestor of `path` (itself included) that has a /.fidelity control folder."""
    p = os.path.abspath(path)
    while True:
        if os.path.isdir(os.path.join(p, CONTROL, "order")):
            return p
        parent = os.path.dirname(p)
        if parent == p:
            raise FileNotFoundError(f"{path} is not inside a fidelityfs mount (no .fidelity/order above it)")
        p = parent


def _read_json(path, name):
    with open(os.path.join(find_mount_root(path), CONTROL, name), encoding="utf-8") as f:
        return json.load(f)


def read_stats(mount):
    """The daemon's counters (`/.fidelity/stats`) as a dict; `mount` is any path inside the mount."""
    return _read_json(mount, "stats")


def read_config(mount):
    """The mount's effective settings (`/.fidelity/config`) as a dict: store, levels, scan_group, rules,
    options; `mount` is any path inside the mount."""
    return _read_json(mount, "config")
