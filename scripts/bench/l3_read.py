#!/usr/bin/env python3
"""Images/s of loading every file of a list into a numpy array with N threads.
   l3_read.py LIST MODE THREADS   (MODE: pil = PIL.Image.open + np.asarray, npy = np.load)
Prints JSON: images_per_s, mb_per_s (decoded pixel bytes)."""
import io
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

paths = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
mode, threads = sys.argv[2], int(sys.argv[3])


def load(p):
    with open(p, "rb") as f:
        data = f.read()
    a = np.load(io.BytesIO(data)) if mode == "npy" else np.asarray(Image.open(io.BytesIO(data)))
    return a.nbytes


t0 = time.perf_counter()
with ThreadPoolExecutor(threads) as ex:
    total = sum(ex.map(load, paths))
dt = time.perf_counter() - t0
print(json.dumps({"images_per_s": len(paths) / dt, "mb_per_s": total / dt / 1e6, "images": len(paths)}))
