#!/usr/bin/python3
"""The frames of a mounted --video-streams store (raw_format=ppm) against the ffmpeg CLI's decode
of the source videos: each video's folder holds `ffprobe -count_frames` frames, and each frame's
luma (BT.601 weights over RGB, the same for both sides) against the CLI's rgb24 decode of the same
frame, as PSNR: the worst frame and the mean; and a digest of every frame's bytes in frame order.
With --reverse, only the digest, of the frames read last to first (on a fresh mount: nothing
decoded yet), to compare with a forward read's. Prints one JSON line.

  scripts/bench/video_frames_check.py VIDEOS MOUNT [--reverse] [--videos N]
"""
import hashlib
import argparse
import json
import os
import subprocess

import numpy as np


def ffprobe_frames(path):
    p = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                        "stream=nb_read_frames", "-of", "csv=p=0", path], capture_output=True, text=True, check=True)
    return int(p.stdout.split(",")[0].strip())


def luma(rgb):
    rgb = rgb.astype(np.float64)
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def ppm_pixels(data):
    """The pixels of a binary PPM (P6, maxval 255), as fidelityfs writes it."""
    parts, pos = [], 0
    while len(parts) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        parts.append(data[pos:end])
        pos = end
    assert parts[0] == b"P6" and parts[3] == b"255", parts
    w, h = int(parts[1]), int(parts[2])
    return np.frombuffer(data, np.uint8, count=w * h * 3, offset=pos + 1).reshape(h, w, 3)


def psnr(a, b):
    mse = np.mean((a - b) ** 2)
    return 99.0 if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


def cli_frames(path, w, h):
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-vsync", "passthrough", "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("videos")
    ap.add_argument("mount")
    ap.add_argument("--reverse", action="store_true")
    ap.add_argument("--videos", type=int, default=4, dest="count")
    a = ap.parse_args()
    sources = []
    for d, _, files in sorted(os.walk(a.videos)):
        sources += [os.path.join(d, f) for f in sorted(files) if f.endswith(".mp4")]
    sources = sources[:a.count]
    worst, means, counts_ok, digest = 99.0, [], True, hashlib.sha256()
    for src in sources:
        folder = os.path.join(a.mount, os.path.relpath(src, a.videos).rsplit(".", 1)[0])
        names = sorted(os.listdir(folder))
        if a.reverse:
            frames = [read(os.path.join(folder, n)) for n in reversed(names)][::-1]
            for b in frames:
                digest.update(b)
            continue
        frames = [read(os.path.join(folder, n)) for n in names]
        for b in frames:
            digest.update(b)
        counts_ok &= len(names) == ffprobe_frames(src)
        first = ppm_pixels(frames[0])
        want = cli_frames(src, first.shape[1], first.shape[0])
        scores = [psnr(luma(ppm_pixels(b)), luma(want[k])) for k, b in enumerate(frames)]
        worst, means = min(worst, min(scores)), means + [float(np.mean(scores))]
    out = {"videos": len(sources), "digest": digest.hexdigest()[:16]}
    if not a.reverse:
        out.update(frame_counts_ok=counts_ok, worst_db=round(worst, 2), mean_db=round(float(np.mean(means)), 2))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
