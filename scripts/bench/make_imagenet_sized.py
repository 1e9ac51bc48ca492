#!/usr/bin/env python3
"""ImageNet-sized JPEGs: an ImageFolder tree whose files weigh what ImageNet's do.

The shared generator's ImageNet-like set (make_imagefolder.py --kind imagenet) has ImageNet's
shapes but upscales small crops of smooth wallpapers, so its files average 25 KB, a quarter of
ImageNet train's ~110 KB (138 GB over 1.28 M images). Per-file costs weigh four times as much
there as on ImageNet. This tree keeps the bytes too: crops of the photos at their own resolution
(no upscaling), Flickr's common 500 px long side, sensor-like noise (real photos have grain and
texture; the wallpapers have none), 4:2:0, quality 93-98: 106 KB on average. Without --photos
(no ../shared), the synthetic photo-like images of tests/fixtures/make_tree.py stand in.

  make_imagenet_sized.py [--photos DIR] --count 5000 --classes 20 --out DIR
"""
import argparse
import os
import random
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from make_tree import photo_like  # noqa: E402

NOISE_SIGMA = 10.5  # with quality 93-98 at 4:2:0 the mean file is ~106 KB
_PHOTOS = []


def _init(photo_dir):
    if photo_dir:
        for f in sorted(os.listdir(photo_dir)):
            if f.lower().endswith((".jpg", ".jpeg", ".png", ".webp")):
                _PHOTOS.append(Image.open(os.path.join(photo_dir, f)).convert("RGB"))


def _make(args):
    idx, out, classes = args
    rng = random.Random(1_000_003 * 7 + idx)
    long_side, short_side = 500, rng.randint(333, 375)
    w, h = (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)
    usable = [p for p in _PHOTOS if p.width >= w and p.height >= h]
    if usable:
        src = usable[rng.randrange(len(usable))]
        x, y = rng.randint(0, src.width - w), rng.randint(0, src.height - h)
        im = src.crop((x, y, x + w, y + h))
    else:
        im = photo_like(rng, w, h)
    a = np.asarray(im).astype(np.float32)
    a += np.random.default_rng(idx).normal(0, NOISE_SIGMA, a.shape)
    im = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")
    cls = f"n{idx % classes:08d}"
    path = os.path.join(out, cls, f"{cls}_{idx}.JPEG")
    im.save(path, "JPEG", quality=rng.randint(93, 98), subsampling=2)
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", help="folder of source photos (shared/datasets/fetch-photos.sh)")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, f"n{c:08d}"), exist_ok=True)
    with ProcessPoolExecutor(initializer=_init, initargs=(a.photos,)) as ex:
        sizes = list(ex.map(_make, [(i, a.out, a.classes) for i in range(a.count)], chunksize=32))
    print(f"{len(sizes)} JPEGs in {a.out}, mean {sum(sizes) / len(sizes) / 1000:.1f} KB", file=sys.stderr)


if __name__ == "__main__":
    main()
