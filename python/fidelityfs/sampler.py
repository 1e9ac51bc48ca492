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
share of the store), and every rank's order has the same length, as with DistributedSampler:
the shorter ones end with a few of their own files again, which yield the same sample indices
again (a sample seen twice in an epoch, never one of another rank's).
"""
import os

import torch.utils.data

from .stats import find_mount_root

__all__ = ["FidelityOrderSampler", "find_mount_root"]


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

    def set_epoch(self, epoch):
        self.epoch = epoch

    def order_path(self):
        name = f"epoch-{self.epoch}"
        if self.world_size > 1:
            name += f".rank-{self.rank}-of-{self.world_size}"
        return os.path.join(self.mount, ".fidelity", "order", name)

    def _indices(self):
        if self._cache is None or self._cache[0] != self.epoch:
            with open(self.order_path(), encoding="utf-8", errors="surrogateescape") as f:
                idx = [self.index_of[line] for line in f.read().split("\n") if line in self.index_of]
            self._cache = (self.epoch, idx)
        return self._cache[1]

    def __iter__(self):
        return iter(self._indices())

    def __len__(self):
        return len(self._indices())
