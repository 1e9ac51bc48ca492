#!/usr/bin/python3
"""Rawframes video datasets made from real photos (synthetic ones without ../shared): each clip a
folder of JPEG frames, a window panning and zooming over one photo with a little sensor noise,
so that consecutive frames differ as a video's do.

  jester:   OUT/CLIP/00001.jpg ...            (20BN-Jester's layout: 100 px high frames)
  kinetics: OUT/CLASS/CLIP/img_00001.jpg ...  (mmaction2's rawframes: 256 px short side)

  scripts/bench/make_clips.py --kind jester --clips 300 --frames 36 --out DIR
  scripts/bench/make_clips.py --kind kinetics --clips 100 --frames 64 --classes 10 --out DIR
"""
import argparse
import glob
import os
import subprocess
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = {"jester": (176, 100), "kinetics": (340, 256)}


def photos():
    fetch = os.path.join(ROOT, "..", "shared", "datasets", "fetch-photos.sh")
    if not os.path.exists(fetch):
        return []
    p = subprocess.run(["bash", fetch], capture_output=True, text=True)
    folder = p.stdout.split()[-1] if p.returncode == 0 and p.stdout.strip() else ""
    return sorted(glob.glob(os.path.join(folder, "*.jpg"))) if os.path.isdir(folder) else []


def source_image(files, rng, w, h):
    """A photo (or a synthetic scene) at about 3x the frame size."""
    if files:
        im = Image.open(files[rng.integers(len(files))]).convert("RGB")
        scale = 3 * max(w / im.width, h / im.height)
        return im.resize((max(w * 2, int(im.width * scale)), max(h * 2, int(im.height * scale))), Image.BILINEAR)
    y, x = np.mgrid[0:h * 3, 0:w * 3].astype(np.float32)
    img = np.stack([128 + 90 * np.sin(x * f + y * g) for f, g in rng.uniform(0.005, 0.05, (3, 2))], -1)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def make_clip(args):
    folder, name, frames, w, h, seed, files = args
    rng = np.random.default_rng(seed)
    src = source_image(files, rng, w, h)
    x0, y0 = rng.uniform(0, src.width - w * 1.6), rng.uniform(0, src.height - h * 1.6)
    dx, dy = rng.uniform(-2, 2, 2)
    zoom = rng.uniform(-0.004, 0.004)
    os.makedirs(folder, exist_ok=True)
    for i in range(frames):
        s = 1.4 + zoom * i
        x, y = np.clip(x0 + dx * i, 0, src.width - w * s), np.clip(y0 + dy * i, 0, src.height - h * s)
        frame = src.crop((int(x), int(y), int(x + w * s), int(y + h * s))).resize((w, h), Image.BILINEAR)
        a = np.asarray(frame).astype(np.int16) + rng.integers(-3, 4, (h, w, 3), dtype=np.int16)
        Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(os.path.join(folder, name % (i + 1)), quality=90)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=SIZES, required=True)
    ap.add_argument("--clips", type=int, default=300)
    ap.add_argument("--frames", type=int, default=36)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    w, h = SIZES[a.kind]
    files = photos()
    jobs = []
    for c in range(a.clips):
        if a.kind == "jester":
            jobs.append((os.path.join(a.out, f"{100000 + c}"), "%05d.jpg", a.frames, w, h, c, files))
        else:
            jobs.append((os.path.join(a.out, f"class{c % a.classes:03d}", f"video_{c:05d}"), "img_%05d.jpg", a.frames, w, h, c,
                         files))
    with ProcessPoolExecutor(a.jobs) as ex:
        list(ex.map(make_clip, jobs, chunksize=4))


if __name__ == "__main__":
    main()
