#!/usr/bin/env python3
"""What a CPU-bound loader gets from each tree, for scripts/bench/decode.sh.

For every NAME=DIR given (an ImageFolder tree: the source on ext4, a mount, a mount's
/.fidelity/sg/K view), in one run:
  * images/s through torchvision ImageFolder + RandomResizedCrop(224) + ToTensor and a DataLoader
    with 2 worker processes (batch 32, shuffled): the first epoch (reported on its own: what a
    mount makes on first reads is made then), then, warm, RUNS epochs per tree, the trees taking turns epoch by epoch (a different one first each round) so
    that the noise of a shared machine hits them alike;
  * decode time per image, one thread, the first DECODE_FILES files' bytes in memory, the trees
    taking turns pass by pass: Pillow's Image.open(BytesIO(b)).load(); torchvision.io.decode_jpeg;
    and decode_jpeg followed by RandomResizedCrop(224) on the tensor.
Prints a table (median of the runs; "vs first" is the median of the per-round ratios to the first
tree for the DataLoader, and a speed ratio for the decodes: above 1 is faster than the first
tree) and writes the figures as JSON with --json.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from torchvision.io import decode_jpeg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pillow_decode import decode_pass  # noqa: E402


def loader(root):
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
    ds = datasets.ImageFolder(root, transform=tf)
    return ds, DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True)


def torchvision_pass(tensors, crop):
    """Seconds per image to decode every tensor once with decode_jpeg (and, with `crop`, to take
    a RandomResizedCrop(224) of it), one thread."""
    rrc = transforms.RandomResizedCrop(224, antialias=True)
    t0 = time.perf_counter()
    for t in tensors:
        img = decode_jpeg(t)
        if crop:
            rrc(img)
    return (time.perf_counter() - t0) / len(tensors)


def epoch(dl):
    t0 = time.perf_counter()
    n = 0
    for x, _ in dl:
        n += x.shape[0]
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", metavar="NAME=DIR")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--decode-files", type=int, default=300)
    ap.add_argument("--decode-passes", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    trees = [t.split("=", 1) for t in a.trees]
    names = [n for n, _ in trees]

    loaders, files, first = {}, {}, {}
    for name, root in trees:
        ds, dl = loader(root)
        loaders[name] = dl
        files[name] = [p for p, _ in ds.samples]
        first[name] = epoch(dl)  # then warm: page cache, the daemon's caches, the workers
    counts = {len(f) for f in files.values()}
    if len(counts) != 1:
        sys.exit(f"decode_loader.py: the trees differ in file count: {counts}")

    rates = {n: [] for n in names}
    ratios = {n: [] for n in names}
    for r in range(a.runs):
        turn = names[r % len(names):] + names[:r % len(names)]
        got = {n: epoch(loaders[n]) for n in turn}
        for n in names:
            rates[n].append(got[n])
            ratios[n].append(got[n] / got[names[0]])

    kinds = ("pillow", "decode_jpeg", "decode_jpeg+crop")
    decode = {(n, k): [] for n in names for k in kinds}
    bufs, tensors = {}, {}
    for n in names:
        bufs[n] = []
        for p in files[n][:a.decode_files]:
            with open(p, "rb") as f:
                bufs[n].append(f.read())
        tensors[n] = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in bufs[n]]
    for r in range(a.decode_passes):
        for n in names[r % len(names):] + names[:r % len(names)]:
            decode[n, "pillow"].append(decode_pass(bufs[n]))
            decode[n, "decode_jpeg"].append(torchvision_pass(tensors[n], False))
            decode[n, "decode_jpeg+crop"].append(torchvision_pass(tensors[n], True))

    base = {k: statistics.median(decode[names[0], k]) for k in kinds}
    out = {}
    print(f"{len(files[names[0]])} files; DataLoader: 2 workers, batch 32, RandomResizedCrop(224) + ToTensor, "
          f"warm, median of {a.runs} epochs; decodes: {min(a.decode_files, len(files[names[0]]))} files, "
          f"one thread, median of {a.decode_passes} passes")
    print(f"\n| tree | first epoch images/s | DataLoader images/s | vs {names[0]} | Pillow decode us/image | vs {names[0]} "
          f"| decode_jpeg us/image | vs {names[0]} | decode_jpeg + RandomResizedCrop(224) us/image | vs {names[0]} "
          f"| mean bytes/file |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in names:
        mean_bytes = sum(len(b) for b in bufs[n]) / len(bufs[n])
        out[n] = {"first_epoch_images_per_s": first[n], "images_per_s": rates[n], "vs_first": ratios[n],
                  "mean_bytes": mean_bytes}
        cells = []
        for k in kinds:
            d = statistics.median(decode[n, k])
            out[n][k + "_us"] = [x * 1e6 for x in decode[n, k]]
            cells.append(f"{d * 1e6:.0f} | {base[k] / d:.2f}x")
        print(f"| {n} | {first[n]:.0f} | {statistics.median(rates[n]):.0f} | {statistics.median(ratios[n]):.2f}x | "
              f"{' | '.join(cells)} | {mean_bytes / 1e3:.1f} kB |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
