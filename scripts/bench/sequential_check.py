#!/usr/bin/python3
"""encoding=sequential over high-quality JPEGs of real photos, every level: what a user who turns
it on gets. Makes quality 90-100 JPEGs of PHOTOS photos (short side SIZE) with Pillow (4:4:4, 4:2:2,
4:2:0, gray, CMYK) and cjpeg (1x1, 2x1, 2x2 sampling), packs them, mounts the store with
encoding=sequential and reads every file at every level; prints, per kind, the files, the reads
that failed (EIO), whose pixels differ from the progressive level (Pillow's decode), whose size
differs from stat, and the levels served progressive instead (`sequential_fallbacks`).
Needs root (a mount).
  scripts/bench/sequential_check.py [--photos 8] [--size 800] [--out DIR]
  env: FIDELITYFS_BIN (default build/cli/fidelityfs), BENCH_DIR (default /tmp/fidelityfs-bench)
"""
import argparse
import collections
import glob
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FIDELITYFS_BIN", os.path.join(ROOT, "build", "cli", "fidelityfs"))
QUALITIES = range(90, 101)


def photos(count):
    fetch = os.path.join(ROOT, "..", "shared", "datasets", "fetch-photos.sh")
    folder = subprocess.run(["bash", fetch], capture_output=True, text=True, check=True).stdout.split()[-1]
    files = sorted(glob.glob(os.path.join(folder, "*.jpg")) + glob.glob(os.path.join(folder, "*.png")))
    return files[:count]


def make_set(src, count, size):
    """The tree: KIND/PHOTO_qQ.jpg; KIND is pil-444 ... cjpeg-2x2."""
    for i, path in enumerate(photos(count)):
        im = Image.open(path).convert("RGB")
        im.thumbnail((size * 4, size), Image.LANCZOS) if im.height <= im.width else im.thumbnail((size, size * 4))
        ppm = io.BytesIO()
        im.save(ppm, "PPM")
        for q in QUALITIES:
            for kind, save in (("pil-444", lambda p: im.save(p, quality=q, subsampling=0)),
                               ("pil-422", lambda p: im.save(p, quality=q, subsampling=1)),
                               ("pil-420", lambda p: im.save(p, quality=q, subsampling=2)),
                               ("pil-gray", lambda p: im.convert("L").save(p, quality=q)),
                               ("pil-cmyk", lambda p: im.convert("CMYK").save(p, quality=q))):
                os.makedirs(os.path.join(src, kind), exist_ok=True)
                save(os.path.join(src, kind, f"p{i}_q{q}.jpg"))
            for sample in ("1x1", "2x1", "2x2"):
                out = os.path.join(src, f"cjpeg-{sample}", f"p{i}_q{q}.jpg")
                os.makedirs(os.path.dirname(out), exist_ok=True)
                subprocess.run(["cjpeg", "-quality", str(q), "-sample", sample, "-outfile", out], input=ppm.getvalue(),
                               check=True)


def pixels(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return np.asarray(im)


def check(mnt, levels):
    """{kind: Counter} over every file at every level."""
    out = collections.defaultdict(collections.Counter)
    files = sorted(os.path.relpath(os.path.join(d, f), mnt) for d, _, fs in os.walk(mnt) for f in fs)
    for level in range(1, levels + 1):
        os.setxattr(mnt, "user.fidelity.scan_group", str(level).encode())
        for rel in files:
            kind = rel.split("/")[0]
            c = out[kind]
            c["checks"] += 1
            p = os.path.join(mnt, rel)
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except OSError:
                c["eio"] += 1
                continue
            with open(os.path.join(mnt, ".fidelity", "sg", str(level), rel), "rb") as f:
                progressive = f.read()
            c["size_differs"] += os.stat(p).st_size != len(data)
            c["pixels_differ"] += not np.array_equal(pixels(data), pixels(progressive))
            c["served_progressive"] += data == progressive
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--photos", type=int, default=8)
    ap.add_argument("--size", type=int, default=800)
    ap.add_argument("--out", default=os.path.join(os.environ.get("BENCH_DIR", "/tmp/fidelityfs-bench"), "sequential-check"))
    a = ap.parse_args()
    src, store, mnt = (os.path.join(a.out, d) for d in (f"src-{a.photos}-{a.size}", f"store-{a.photos}-{a.size}", "mnt"))
    if not os.path.exists(src + ".done"):  # beside the tree: pack would take it for a file
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
        make_set(src, a.photos, a.size)
        open(src + ".done", "w").close()
    if not os.path.exists(os.path.join(store, "index.sqlite")):
        subprocess.run([BIN, "pack", src, store, "--progress", "off"], check=True, capture_output=True)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([BIN, "mount", store, mnt, "-o", "encoding=sequential"], check=True, capture_output=True)
    try:
        levels = int(os.getxattr(os.path.join(mnt, "pil-444", os.listdir(os.path.join(mnt, "pil-444"))[0]),
                                 "user.fidelity.levels"))
        counts = check(mnt, levels)
        with open(os.path.join(mnt, ".fidelity", "stats")) as f:
            stats = json.load(f)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
    keys = ("checks", "eio", "pixels_differ", "size_differs", "served_progressive")
    print(f"## encoding=sequential, {a.photos} photos (short side {a.size}), quality 90-100, levels 1-{levels}\n")
    print("| kind | " + " | ".join(keys) + " |\n| --- |" + " ---: |" * len(keys))
    total = collections.Counter()
    for kind in sorted(counts):
        total.update(counts[kind])
        print(f"| {kind} | " + " | ".join(str(counts[kind][k]) for k in keys) + " |")
    print("| all | " + " | ".join(str(total[k]) for k in keys) + " |")
    print(f"\nstats: sequential_made {stats['sequential_made']}, sequential_fallbacks {stats['sequential_fallbacks']}, "
          f"eio_errors {stats['eio_errors']}")
    bad = total["eio"] + total["pixels_differ"] + total["size_differs"]
    print(f"goal: 0 EIO, 0 pixel or size differences: {'met' if bad == 0 else 'NOT met'}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
