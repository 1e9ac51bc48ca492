"""A torch Sampler that reads a fidelityfs mount's published order, so that a DataLoader over an
ImageFolder on the mount reads records nearly sequentially (cold epochs at storage speed) while
batches stay statistically close to a uniform shuffle.

    from fidelityfs.sampler import FidelityOrderSampler
    ds = torchvision.datasets.ImageFolder("/mnt/in/train", transform=tf)
    sampler = FidelityOrderSampler(ds)            # rank/world from torch.distributed if set
    loader = torch.utils.data.DataLoader(ds, batch_size=256, sampler=sampler, num_workers=8)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)                  # like DistributedSampler
        for images, labels in loader: ...

Needs nothing beyond torch. The order is /.fidelity/order/epoch-N (or epoch-N.rank-R-of-W) of
the mount that holds the dataset's root; paths in it are relative to the mount root.

With several ranks, each rank's order holds whole records of its own (each node reads only its
share of the store; with the mount's default order_ranks=stable, the same records every epoch,
so a node's disk cache serves the epochs after the first), and every rank's order has the same
length, as with DistributedSampler: the shorter ones end with a few of their own files again,
which yield the same sample indices again (a sample seen twice in an epoch, never one of another
rank's).

Resuming mid-epoch: save `sampler.state_dict()` with the checkpoint (epoch, position, seed, rank,
world size) and call `sampler.load_state_dict(state)` after a restart: the next iteration yields
the rest of that epoch, the same samples in the same order. `position` is the number of samples
of the epoch already taken: by default what the sampler's iterator yielded, which a DataLoader
with workers runs ahead of the batches it returned; pass `state_dict(samples_seen=N)` with the
count the training loop consumed to resume exactly there.
"""
import os
import re

import torch.utils.data

from .stats import find_mount_root

__all__ = ["FidelityOrderSampler", "find_mount_root", "order_line_path"]


_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}


def order_line_path(line):
    """The relative path one line of an order file names: the file escapes backslash, newline and
    carriage return in paths as \\\\, \\n and \\r (docs/FORMAT.md, "Published read orders")."""
    if "\\" not in line:
        return line
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), line)


class FidelityOrderSampler(torch.utils.data.Sampler):
    """Yields the dataset's sample indices in the mount's published order for the current epoch.

    dataset: anything with `root` and `samples` [(path, target), ...] (torchvision ImageFolder,
    DatasetFolder). Samples whose files are not in the order are not yielded; files in the order
    that are not samples (annotations, other splits) are skipped."""

    def __init__(self, dataset, rank=None, world_size=None, epoch=0):
        if rank is None or world_size is None:
            dist = torch.distributed
            ready = dist.is_available() and dist.is_initialized()
            rank = (dist.get_rank() if ready else 0) if rank is None else rank
            world_size = (dist.get_world_size() if ready else 1) if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.rank, self.world_size, self.epoch = rank, world_size, epoch
        self.mount = find_mount_root(dataset.root)
        self.index_of = {os.path.relpath(os.path.abspath(p), self.mount): i for i, (p, _) in enumerate(dataset.samples)}
        self._cache = None
        self._start = 0     # where the next iteration of self.epoch begins (load_state_dict)
        self._yielded = 0   # samples the current iteration has yielded, counted from 0

    def set_epoch(self, epoch):
        if epoch != self.epoch:
            self._start = 0
        self.epoch = epoch

    def order_seed(self):
        """The seed of the mount's published orders (the root's user.fidelity.order_seed)."""
        return int(os.getxattr(self.mount, "user.fidelity.order_seed"))

    def state_dict(self, samples_seen=None):
        """Where this rank is: {epoch, position, seed, rank, world_size}. position: samples of the
        epoch already taken, `samples_seen` if given, else those the iterator has yielded."""
        position = self._yielded if samples_seen is None else int(samples_seen)
        if not 0 <= position <= len(self):
            raise ValueError(f"samples_seen {position} is not in [0, {len(self)}] (the epoch's length)")
        return {"epoch": self.epoch, "position": position, "seed": self.order_seed(), "rank": self.rank,
                "world_size": self.world_size}

    def load_state_dict(self, state):
        """Resumes at `state`: the next iteration yields the rest of that epoch's order."""
        missing = {"epoch", "position", "seed", "rank", "world_size"} - set(state)
        if missing:
            raise ValueError(f"sampler state lacks {', '.join(sorted(missing))}")
        for key, mine in (("world_size", self.world_size), ("rank", self.rank), ("seed", self.order_seed())):
            if int(state[key]) != mine:
                raise ValueError(f"the sampler state is of {key} {state[key]}, this sampler's is {mine}: "
                                 f"the order it was taken in is not this one")
        self.epoch = int(state["epoch"])
        position = int(state["position"])
        if not 0 <= position <= len(self):
            raise ValueError(f"sampler state position {position} is not in [0, {len(self)}] (epoch {self.epoch})")
        self._start = position

    def order_path(self):
        name = f"epoch-{self.epoch}"
        if self.world_size > 1:
            name += f".rank-{self.rank}-of-{self.world_size}"
        return os.path.join(self.mount, ".fidelity", "order", name)

    def _indices(self):
        if self._cache is None or self._cache[0] != self.epoch:
            with open(self.order_path(), encoding="utf-8", errors="surrogateescape", newline="") as f:
                paths = (order_line_path(line) for line in f.read().split("\n"))
                idx = [self.index_of[p] for p in paths if p in self.index_of]
            self._cache = (self.epoch, idx)
        return self._cache[1]

    def __iter__(self):
        indices = self._indices()
        start, self._start = self._start, 0  # a resumed epoch once; the next one whole
        self._yielded = start
        for i in indices[start:]:
            self._yielded += 1
            yield i

    def __len__(self):
        return len(self._indices())
