#!/usr/bin/env python3
"""How random are batches drawn in a mount's published order? Compares, per batch of B files,
the number of distinct classes (top-level folders) and the total-variation distance between the
batch's class histogram and the dataset's, for: the published order (epochs 0..E-1), a uniform
shuffle (what DataLoader(shuffle=True) does), the storage order (records back to back) and the
sorted tree (class after class, the worst case).

    scripts/bench/order_mix.py MOUNT [--batch 256] [--epochs 3]
"""
import argparse
import collections
import os
import random
import statistics


def batch_stats(order, cls, batch):
    total = collections.Counter(cls[p] for p in order)
    n = len(order)
    distinct, tv = [], []
    for i in range(0, n - batch + 1, batch):
        c = collections.Counter(cls[p] for p in order[i:i + batch])
        distinct.append(len(c))
        tv.append(0.5 * sum(abs(c.get(k, 0) / batch - v / n) for k, v in total.items()))
    return statistics.mean(distinct), statistics.mean(tv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mount")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    order_dir = os.path.join(a.mount, ".fidelity", "order")
    with open(os.path.join(order_dir, "epoch-0"), encoding="utf-8", errors="surrogateescape") as f:
        files = [p for p in f.read().split("\n")[:-1] if "/" in p]  # samples live in class folders
    cls = {p: p.split("/", 1)[0] for p in files}
    classes = len(set(cls.values()))
    rows = []
    for e in range(a.epochs):
        with open(os.path.join(order_dir, f"epoch-{e}"), encoding="utf-8", errors="surrogateescape") as f:
            order = [p for p in f.read().split("\n")[:-1] if p in cls]
        rows.append((f"published epoch-{e}", batch_stats(order, cls, a.batch)))
    for s in range(a.epochs):
        o = sorted(files)
        random.Random(s).shuffle(o)
        rows.append((f"uniform shuffle {s}", batch_stats(o, cls, a.batch)))
    pos = {p: int(os.getxattr(os.path.join(a.mount, p), "user.fidelity.position")) for p in files}
    rows.append(("storage order", batch_stats(sorted(files, key=pos.get), cls, a.batch)))
    rows.append(("sorted tree", batch_stats(sorted(files), cls, a.batch)))
    print(f"{len(files)} files, {classes} classes, batches of {a.batch}")
    print(f"{'order':<22} {'distinct classes/batch':>24} {'TV distance to dataset':>24}")
    for name, (d, tv) in rows:
        print(f"{name:<22} {d:>24.2f} {tv:>24.3f}")


if __name__ == "__main__":
    main()
