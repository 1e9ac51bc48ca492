"""Pillow's decode time per image, as the decode benchmarks measure it."""
import gc
import io
import time

from PIL import Image


def decode_pass(bufs):
    """Seconds per image to decode every buffer once: Image.open(BytesIO(b)).load(), one thread,
    the garbage collector off."""
    gc.disable()
    t0 = time.perf_counter()
    for b in bufs:
        Image.open(io.BytesIO(b)).load()
    t = time.perf_counter() - t0
    gc.enable()
    return t / len(bufs)
