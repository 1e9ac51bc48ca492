#!/usr/bin/env python3
"""Trains a small torchvision model on an ImageNet-like folder on a fidelityfs mount, on the CPU,
with the level chosen by fidelityfs.autotune.FidelityAutotuner and the reads in the mount's
published order; prints the level, images/s and the mean loss of each epoch.

    scripts/examples/train_autotune.py /mnt/in/train --epochs 4 --warmup 1 --every 2

The package comes from an install (pip install ./python) or, failing that, from python/ beside
this script. Needs torch and torchvision (Debian: python3-torch python3-torchvision).
"""
import argparse
import logging
import os
import sys
import time

try:
    import fidelityfs  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python"))

import torch
import torchvision
from torchvision import transforms

from fidelityfs.autotune import FidelityAutotuner
from fidelityfs.sampler import FidelityOrderSampler


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="image folder (class subfolders) on a fidelityfs mount")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--arch", choices=["resnet18", "mobilenet_v3_small"], default="resnet18")
    ap.add_argument("--image-size", type=int, default=64, help="training crop size in pixels (default 64)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threshold", type=float, default=0.8, help="gradient similarity a level must reach")
    ap.add_argument("--warmup", type=int, default=1, help="epochs before the first tuning")
    ap.add_argument("--every", type=int, default=2, help="epochs between tunings")
    ap.add_argument("--tune-batches", type=int, default=1, help="batches of the fixed tuning sample")
    ap.add_argument("--max-images", type=int, default=0, help="images per epoch (0: all)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)

    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.image_size, scale=(0.35, 1.0), antialias=True),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = torchvision.datasets.ImageFolder(a.root, transform=tf)
    model = getattr(torchvision.models, a.arch)(num_classes=len(ds.classes))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.functional.cross_entropy
    tuner = FidelityAutotuner(model, loss_fn, ds, threshold=a.threshold, warmup=a.warmup, every=a.every,
                              batches=a.tune_batches, batch_size=a.batch_size, seed=a.seed)
    sampler = FidelityOrderSampler(ds)
    print(f"{a.arch}, {len(ds.classes)} classes, {len(ds)} images, {a.image_size} px, levels 1..{tuner.levels}, "
          f"threshold {a.threshold}, warmup {a.warmup}, every {a.every}", flush=True)
    for epoch in range(a.epochs):
        t0 = time.monotonic()
        level = tuner.step(epoch)
        tune_s = time.monotonic() - t0
        sampler.set_epoch(epoch)
        order = list(sampler)
        if a.max_images:
            order = order[:a.max_images]
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, sampler=order, num_workers=a.workers)
        model.train()
        seen, total = 0, 0.0
        t1 = time.monotonic()
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            seen += x.shape[0]
            total += loss.item() * x.shape[0]
        dt = time.monotonic() - t1
        tuned = f", tuning {tune_s:.1f} s" if tuner.is_tuning_epoch(epoch) else ""
        print(f"epoch {epoch}: level {level}, {seen} images, {seen / dt:.1f} images/s, loss {total / max(seen, 1):.4f}{tuned}",
              flush=True)


if __name__ == "__main__":
    main()
