#!/usr/bin/env python3
"""An ImageFolder tree of many small JPEGs (48x48, about 1 KB each, like a downsampled ImageNet),
for scripts/bench/scale.sh: COUNT files spread evenly over CLASSES class folders named like
ImageNet's (n00000000/n00000000_0.JPEG ...). Each file is a random crop of one of the photos in
--photos, scaled to 48x48 and saved at a random quality; without --photos, a synthetic image
(a random colour gradient with noise and a few shapes). Varied content, no two files alike.
Deterministic for a given --seed; classes are made by --jobs processes.

  make_small.py [--photos DIR] --count 1281167 --classes 1000 --out DIR [--jobs 2] [--seed 0]
"""
import argparse
import io
import os
import random
import sys
import time
from multiprocessing import Pool

from PIL import Image, ImageDraw

SIDE = 48
_SOURCES = []


def _init(photo_dir):
    global _SOURCES
    if not photo_dir:
        return
    paths = sorted(os.path.join(photo_dir, f) for f in os.listdir(photo_dir)
                   if f.lower().endswith((".jpg", ".jpeg", ".png", ".webp")))
    for p in paths:
        im = Image.open(p)
        im.draft("RGB", (1024, 1024))  # JPEG: decode at a reduced scale, fast
        im = im.convert("RGB")
        if max(im.size) > 1024:
            s = 1024 / max(im.size)
            im = im.resize((max(SIDE, int(im.width * s)), max(SIDE, int(im.height * s))), Image.BILINEAR)
        _SOURCES.append(im)
    if not _SOURCES:
        sys.exit(f"make_small.py: no photos in {photo_dir}")


def _photo(rng):
    im = rng.choice(_SOURCES)
    W, H = im.size
    side = rng.randint(SIDE, max(SIDE, min(W, H) // 3))
    w = min(W, int(side * rng.uniform(0.8, 1.25)))
    x, y = rng.randint(0, W - w), rng.randint(0, H - side)
    out = im.resize((SIDE, SIDE), Image.BILINEAR, box=(x, y, x + w, y + side))
    if rng.random() < 0.5:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return out


def _synthetic(rng):
    c0 = [rng.randint(0, 255) for _ in range(3)]
    c1 = [rng.randint(0, 255) for _ in range(3)]
    im = Image.linear_gradient("L").resize((SIDE, SIDE)).rotate(rng.uniform(0, 360))
    im = Image.merge("RGB", [im.point(lambda v, a=a, b=b: a + (b - a) * v // 255) for a, b in zip(c0, c1)])
    d = ImageDraw.Draw(im)
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randint(0, SIDE - 8), rng.randint(0, SIDE - 8)
        box = (x0, y0, x0 + rng.randint(4, SIDE - x0), y0 + rng.randint(4, SIDE - y0))
        fill = tuple(rng.randint(0, 255) for _ in range(3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)(box, fill=fill)
    noise = Image.effect_noise((SIDE, SIDE), rng.uniform(8, 40)).convert("RGB")
    return Image.blend(im, noise, 0.15)


def _make_class(args):
    out, cls, first, count, seed = args
    rng = random.Random(seed * 1000003 + cls)
    folder = os.path.join(out, f"n{cls:08d}")
    os.makedirs(folder, exist_ok=True)
    made = 0
    for j in range(first, first + count):
        im = _photo(rng) if _SOURCES else _synthetic(rng)
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=rng.randint(70, 90), subsampling=2)
        with open(os.path.join(folder, f"n{cls:08d}_{j}.JPEG"), "wb") as f:
            f.write(buf.getbuffer())
        made += buf.tell()
    return count, made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    base, extra = divmod(a.count, a.classes)
    work = []
    for c in range(a.classes):
        n = base + (c < extra)
        work.append((a.out, c, 0, n, a.seed))
    os.makedirs(a.out, exist_ok=True)
    t0 = time.monotonic()
    files = total = 0
    with Pool(a.jobs, initializer=_init, initargs=(a.photos,)) as pool:
        for k, (n, b) in enumerate(pool.imap_unordered(_make_class, work)):
            files += n
            total += b
            if (k + 1) % 100 == 0 or k + 1 == len(work):
                dt = time.monotonic() - t0
                print(f"make_small: {files} files in {k + 1} classes, {total / max(files, 1):.0f} B/file, "
                      f"{files / dt:.0f} files/s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
