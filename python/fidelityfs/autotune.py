"""Chooses the level a dataset is read at during training, from the model's gradients, as PCR's
autotuner does (Kuchnik et al., "Progressive Compressed Records", VLDB 2021, sections 4.3 and
6.5): at a tuning epoch, a fixed sample of the dataset's images is read at full fidelity and at
each lower level; the lowest level whose loss gradient points the way full fidelity's does
(cosine similarity >= `threshold`) is set on the dataset's folder for the epochs that follow.

    from fidelityfs.autotune import FidelityAutotuner
    ds = torchvision.datasets.ImageFolder("/mnt/in/train", transform=tf)
    tuner = FidelityAutotuner(model, torch.nn.functional.cross_entropy, ds, threshold=0.8, warmup=5, every=20)
    for epoch in range(epochs):
        level = tuner.step(epoch)      # tunes at epochs 5, 25, 45, ...; returns the level in effect
        train_one_epoch(model, loader)

API
  FidelityAutotuner(model, loss_fn, data, *, transform=None, target_transform=None,
                    threshold=0.8, warmup=5, every=20, batches=2, batch_size=32,
                    candidates=None, target=None, seed=0, train_mode=True, workers=4)
    model      a torch.nn.Module (with DistributedDataParallel, pass its .module).
    loss_fn    loss_fn(model(x), y) -> a scalar tensor (e.g. torch.nn.functional.cross_entropy).
    data       an ImageFolder/DatasetFolder over the mount (anything with `root`, `samples`
               [(path, target), ...], `transform`, `target_transform`, `loader`), or the path of
               an image folder on the mount (an ImageFolder is made from it). `transform` and
               `target_transform` override the dataset's.
    threshold  the similarity a level must reach; 1.0 keeps full fidelity, -1 takes level 1.
    warmup, every  tuning epochs are warmup, warmup + every, warmup + 2 * every, ...; before the
               first, the autotuner changes nothing (the level is whatever the mount has).
    batches, batch_size  the fixed sample: batches * batch_size files drawn once with `seed`.
    candidates the levels tried (default 1..L-1, tried lowest first; the first to reach the
               threshold wins, so a low threshold costs few gradients).
    target     the folder (or file) whose level is set: default the dataset's root.
    train_mode the module mode gradients are taken in (True: as in training, batch norm on
               batch statistics); the model's own modes are restored afterwards.
  step(epoch) / on_epoch_start(epoch) -> int: tunes if `epoch` is a tuning epoch, then returns
               the effective level of `target`.
  tune(epoch=None) -> int: tunes now and returns the level chosen.
  is_tuning_epoch(epoch) -> bool; history: a list with a dict per tuning (epoch, level,
  similarities {k: cosine}, threshold, images, seconds); logged on the "fidelityfs.autotune" logger.

What tuning leaves as it was: the parameters and their .grad (gradients come from
torch.autograd.grad, which never writes .grad), the optimizer (not involved), every module's
train/eval mode, the buffers (batch norm's running statistics, saved and written back), and the
random number generators (torch CPU and CUDA, Python's `random`, NumPy's global state), so that
the training that follows is the same as without it. Each level's images get the same random
transform draws and the same dropout masks, so the levels differ only in their pixels.

The images are read from the control folder: full fidelity from /.fidelity/sg/L/..., level k
from /.fidelity/sg/k/..., whatever the overrides; only the chosen level is set on the live tree.
"""
import logging
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from .levels import get_level, level_count, set_level
from .stats import CONTROL, find_mount_root

__all__ = ["FidelityAutotuner"]

log = logging.getLogger(__name__)


def _default_loader(path):
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


class _Saved:
    """Module modes, buffers and RNG states, written back on restore()."""

    def __init__(self, model):
        self.modes = [(m, m.training) for m in model.modules()]
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]
        self.torch_rng = torch.random.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.py_rng = random.getstate()
        np = sys.modules.get("numpy")
        self.np_rng = np.random.get_state() if np is not None else None

    def restore(self):
        for m, training in self.modes:
            m.training = training
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)
        torch.random.set_rng_state(self.torch_rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        random.setstate(self.py_rng)
        if self.np_rng is not None:
            sys.modules["numpy"].random.set_state(self.np_rng)


class FidelityAutotuner:
    def __init__(self, model, loss_fn, data, *, transform=None, target_transform=None, threshold=0.8, warmup=5,
                 every=20, batches=2, batch_size=32, candidates=None, target=None, seed=0, train_mode=True, workers=4):
        if isinstance(data, (str, os.PathLike)):
            from torchvision.datasets import ImageFolder

            data = ImageFolder(os.fspath(data))
        if every < 1 or warmup < 0 or batches < 1 or batch_size < 1:
            raise ValueError("every, batches and batch_size must be >= 1, warmup >= 0")
        self.model, self.loss_fn = model, loss_fn
        self.threshold, self.warmup, self.every = float(threshold), int(warmup), int(every)
        self.batch_size, self.seed, self.train_mode, self.workers = int(batch_size), int(seed), train_mode, workers
        self.transform = transform if transform is not None else getattr(data, "transform", None)
        self.target_transform = target_transform if target_transform is not None else getattr(data, "target_transform", None)
        self.loader = getattr(data, "loader", None) or _default_loader
        root = os.path.abspath(data.root)
        self.mount = find_mount_root(root)
        self.target = os.path.abspath(target) if target is not None else root
        for p in (root, self.target):
            rel = os.path.relpath(p, self.mount)
            if rel == CONTROL or rel.startswith(CONTROL + os.sep):
                raise ValueError(f"{p}: a path of the live tree is needed, not one under /{CONTROL}")
        self.levels = level_count(self.mount)
        tried = range(1, self.levels) if candidates is None else candidates
        self.candidates = sorted({int(k) for k in tried if 1 <= int(k) < self.levels})
        samples = list(data.samples)
        if not samples:
            raise ValueError(f"{root}: the dataset has no samples")
        n = min(len(samples), batches * self.batch_size)
        picked = sorted(random.Random(self.seed).sample(range(len(samples)), n))
        self.sample = [(os.path.relpath(os.path.abspath(samples[i][0]), self.mount), samples[i][1]) for i in picked]
        self.history = []

    # -- schedule --------------------------------------------------------------------------------
    def is_tuning_epoch(self, epoch):
        return epoch >= self.warmup and (epoch - self.warmup) % self.every == 0

    def step(self, epoch):
        """Tunes when `epoch` is a tuning epoch; returns the effective level of the target."""
        if self.is_tuning_epoch(epoch):
            self.tune(epoch)
        return get_level(self.target)

    on_epoch_start = step

    # -- tuning ----------------------------------------------------------------------------------
    def tune(self, epoch=None):
        """Compares each candidate level's gradient with full fidelity's on the fixed sample, sets
        the lowest level that reaches the threshold (full if none does) and returns it."""
        t0 = time.monotonic()
        saved = _Saved(self.model)
        sims = {}
        try:
            self.model.train(self.train_mode)
            with ThreadPoolExecutor(max(1, self.workers)) as pool:
                full = self._gradient(self.levels, pool)
                chosen = self.levels
                for k in self.candidates:
                    sims[k] = _cosine(full, self._gradient(k, pool))
                    if sims[k] >= self.threshold:
                        chosen = k
                        break
        finally:
            saved.restore()
        set_level(self.target, "full" if chosen == self.levels else chosen)
        entry = {"epoch": epoch, "level": chosen, "similarities": sims, "threshold": self.threshold,
                 "images": len(self.sample), "seconds": time.monotonic() - t0}
        self.history.append(entry)
        log.info("fidelity autotune (epoch %s): level %d of %d on %s; similarity to full %s (threshold %g), %d images, %.1f s",
                 epoch, chosen, self.levels, self.target,
                 ", ".join(f"{k}: {s:.3f}" for k, s in sims.items()) or "-", self.threshold, len(self.sample),
                 entry["seconds"])
        return chosen

    def _paths(self, k):
        return [os.path.join(self.mount, CONTROL, "sg", str(k), rel) for rel, _ in self.sample]

    def _batches(self, k, pool):
        """The fixed sample at level k, in batches: (first index, x, y)."""
        paths = self._paths(k)
        for start in range(0, len(paths), self.batch_size):
            images = list(pool.map(self.loader, paths[start:start + self.batch_size]))
            items = []
            for i, img in enumerate(images, start):
                draw = self.seed * 1_000_003 + i  # the same transform draws for this image at every level
                torch.manual_seed(draw)
                random.seed(draw)
                x = self.transform(img) if self.transform is not None else img
                y = self.sample[i][1]
                items.append((x, self.target_transform(y) if self.target_transform is not None else y))
            x, y = torch.utils.data.default_collate(items)
            yield start, x, y

    def _gradient(self, k, pool):
        """The gradient of the loss over the fixed sample at level k, flattened (float32)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no parameters that require gradients")
        device = params[0].device
        total = None
        for start, x, y in self._batches(k, pool):
            x, y = x.to(device), y.to(device)
            torch.manual_seed(self.seed + start)  # the same dropout masks at every level
            with torch.enable_grad():
                loss = self.loss_fn(self.model(x), y)
                grads = torch.autograd.grad(loss, params, allow_unused=True)
            with torch.no_grad():
                flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
                flat = flat.float() * x.shape[0]
                total = flat if total is None else total.add_(flat)
        return total


def _cosine(a, b):
    with torch.no_grad():
        a, b = a.double(), b.double()
        na, nb = a.norm(), b.norm()
        if na == 0 or nb == 0:
            return 1.0 if na == nb else 0.0
        return max(-1.0, min(1.0, float(a.dot(b) / (na * nb))))
