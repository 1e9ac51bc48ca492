"""fidelityfs: Python helpers for a fidelityfs mount (docs/MOUNT.md).

    fidelityfs.read_stats(path), read_config(path), find_mount_root(path)     # fidelityfs.stats
    fidelityfs.set_level(path, k), get_level, clear_level, level_count, sizes, kind  # fidelityfs.levels
    fidelityfs.set_encoding(path, "sequential"), get_encoding, clear_encoding      # fidelityfs.levels
    fidelityfs.FidelityOrderSampler   # fidelityfs.sampler: the published read order (needs torch)
    fidelityfs.FidelityAutotuner      # fidelityfs.autotune: the level from the gradients (needs torch)

The stats and levels helpers need only the standard library; the sampler and the autotuner
import torch when first used.
"""
from .levels import (ENCODING, SCAN_GROUP, clear_encoding, clear_level, get_encoding, get_level, kind, level_count,
                     set_encoding, set_level, sizes)
from .stats import find_mount_root, read_config, read_stats

__version__ = "0.1.0"

__all__ = ["SCAN_GROUP", "ENCODING", "set_level", "get_level", "clear_level", "level_count", "sizes", "kind",
           "set_encoding", "get_encoding", "clear_encoding", "find_mount_root",
           "read_stats", "read_config", "FidelityOrderSampler", "FidelityAutotuner", "__version__"]


def __getattr__(name):
    if name == "FidelityOrderSampler":
        from .sampler import FidelityOrderSampler
        return FidelityOrderSampler
    if name == "FidelityAutotuner":
        from .autotune import FidelityAutotuner
        return FidelityAutotuner
    raise AttributeError(f"module 'fidelityfs' has no attribute {name!r}")
