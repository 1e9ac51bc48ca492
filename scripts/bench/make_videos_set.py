#!/usr/bin/python3
"""A Kinetics-like video set made with the ffmpeg CLI: COUNT videos of SECONDS s at 340x256, 30 fps,
H.264 yuv420p (libx264 -preset veryfast -crf 23) in CLASSES class folders, OUT/CLASS/YTID_START_END.mp4
as Kinetics names its clips. Each video is a slow pan and zoom (ffmpeg's zoompan) over one of the
real photos of ../shared's fetch-photos.sh (ffmpeg's testsrc2 pattern without them), with a little
temporal noise, as a camera's, so that its frames differ as a real video's do.

  scripts/bench/make_videos_set.py --count 24 --seconds 10 --classes 4 --out DIR [--jobs J]
  scripts/bench/make_videos_set.py --loop VIDEO --seconds 3600 --out FILE.mp4   (one long video:
      VIDEO over and over, encoded with -preset ultrafast)
  scripts/bench/make_videos_set.py --match VIDEO... [--qv 2]   (which libjpeg quality matches the
      ffmpeg CLI's mjpeg -q:v QV on the videos' frames: prints a JSON line)
"""
import argparse
import glob
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_clips import photos  # noqa: E402  (the same photos as the rawframes sets)

W, H, FPS = 340, 256, 30
CLASSES = ["abseiling", "archery", "bowling", "juggling_balls", "playing_guitar", "surfing_water", "tai_chi",
           "walking_the_dog", "yoga", "zumba"]
X264 = ["-c:v", "libx264", "-crf", "23", "-pix_fmt", "yuv420p", "-threads", "1"]


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


def scaled_photos(files, count, rng, folder):
    """Up to `count` of the photos (or testsrc2 pictures), each scaled and cropped once to 4x the frame
    size, as PNGs in `folder`: the videos zoom into these."""
    os.makedirs(folder, exist_ok=True)
    picks = rng.sample(files, min(count, len(files))) if files else [None] * min(count, 8)
    out = []
    for i, f in enumerate(picks):
        png = os.path.join(folder, f"{i:03d}.png")
        if f:
            ffmpeg("-i", f, "-vf", f"scale={4 * W}:{4 * H}:force_original_aspect_ratio=increase,crop={4 * W}:{4 * H}",
                   "-frames:v", "1", png)
        else:  # testsrc2 at another moment for each picture
            ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={4 * W}x{4 * H}:rate=1", "-ss", str(i * 7), "-frames:v", "1", png)
        out.append(png)
    return out


def pan_filter(rng, frames):
    """zoompan from one picture: a zoom in or out between 1.25x and 2x of the picture's width over
    the video, and a pan across a part of it; then temporal noise."""
    z0, z1 = rng.uniform(1.25, 1.5), rng.uniform(1.6, 2.0)
    if rng.random() < 0.5:
        z0, z1 = z1, z0
    fx0, fx1, fy0, fy1 = (rng.uniform(0.05, 0.95) for _ in range(4))
    t = f"on/{max(frames - 1, 1)}"
    return (f"zoompan=z='{z0:.3f}+{z1 - z0:.3f}*{t}':x='(iw-iw/zoom)*({fx0:.3f}+{fx1 - fx0:.3f}*{t})'"
            f":y='(ih-ih/zoom)*({fy0:.3f}+{fy1 - fy0:.3f}*{t})':d={frames}:s={W}x{H}:fps={FPS},noise=alls=6:allf=t")


def ytid(rng):
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for _ in range(11))


def make_set(args):
    rng = random.Random(args.seed)
    pictures = scaled_photos(photos(), min(args.photos, args.count), rng, os.path.join(args.out, ".photos"))
    frames = args.seconds * FPS
    jobs = []
    for i in range(args.count):
        cls = CLASSES[i % args.classes]
        start = rng.randrange(0, 300)
        path = os.path.join(args.out, cls, f"{ytid(rng)}_{start:06d}_{start + args.seconds:06d}.mp4")
        jobs.append((rng.choice(pictures), pan_filter(rng, frames), path))

    def one(job):
        picture, vf, path = job
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ffmpeg("-filter_threads", "1", "-i", picture, "-vf", vf, "-frames:v", str(frames), "-preset", args.preset,
               *X264, path + ".part.mp4")
        os.rename(path + ".part.mp4", path)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    for p in pictures:
        os.unlink(p)
    os.rmdir(os.path.join(args.out, ".photos"))


def make_loop(args):
    """args.loop over and over for args.seconds, re-encoded (ultrafast): one long video."""
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    ffmpeg("-stream_loop", "-1", "-i", args.loop, "-t", str(args.seconds), "-an", "-preset", "ultrafast",
           *X264[:-2], args.out + ".part.mp4")
    os.rename(args.out + ".part.mp4", args.out)


# libjpeg's luminance table at quality 50 (jpeg_set_quality scales it), in natural order.
STD_LUMA = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29,
            51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92, 49, 64, 78, 87, 103, 121,
            120, 101, 72, 92, 95, 98, 112, 100, 103, 99]


def table_quality(jpeg):
    """The libjpeg quality whose luminance table's sum is nearest that of this JPEG's first table."""
    have = sum(Image.open(jpeg).quantization[0])
    scaled = {q: sum(min(255, max(1, (v * (5000 // q if q < 50 else 200 - 2 * q) + 50) // 100)) for v in STD_LUMA)
              for q in range(1, 101)}
    return min(scaled, key=lambda q: abs(scaled[q] - have))


def luma(img):
    """BT.601 luma of an RGB image (PIL), as float32."""
    return np.asarray(img.convert("RGB"), dtype=np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)


def psnr(ref_y, y):
    return 10 * np.log10(255 ** 2 / max(float(np.mean((ref_y - y) ** 2)), 1e-10))


def sample(video, qv, frames, tmp):
    """Every 30th frame of a video (at most `frames`): as RGB PNGs converted as pack converts them
    (swscale bicubic, accurate rounding, full chroma interpolation), and as the ffmpeg CLI's mjpeg
    -q:v qv writes them. Returns the two lists of files."""
    pick = "select='not(mod(n,30))'"
    name = os.path.join(tmp, os.path.basename(video))
    ffmpeg("-i", video, "-vf", pick + ",scale=flags=bicubic+accurate_rnd+full_chroma_int,format=rgb24", "-vsync", "0",
           "-frames:v", str(frames), name + "_%03d.png")
    ffmpeg("-i", video, "-vf", pick, "-vsync", "0", "-frames:v", str(frames), "-qmin", "1", "-q:v", str(qv),
           name + "_%03d.jpg")
    return sorted(glob.glob(name + "_*.png")), sorted(glob.glob(name + "_*.jpg"))


def match(args):
    """Frames of the videos args.match (sample) as references, and as the burst's JPEGs; then each
    reference encoded by libjpeg (PIL: 4:2:0, standard tables, as pack's frames are) at every quality
    60..100. The matched quality is the one whose mean luma PSNR against the references is nearest
    the burst's."""
    refs, burst, burst_bytes = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for video in args.match:
            pngs, jpegs = sample(video, args.qv, args.frames, tmp)
            for png, jpeg in zip(pngs, jpegs):
                refs.append(Image.open(png).convert("RGB"))
                burst.append(psnr(luma(refs[-1]), luma(Image.open(jpeg))))
                burst_bytes.append(os.path.getsize(jpeg))
        tables = table_quality(jpegs[0])
    ref_y = [luma(r) for r in refs]
    by_quality = {}
    for q in range(60, 101):
        ps, size = [], []
        for r, ry in zip(refs, ref_y):
            b = io.BytesIO()
            r.save(b, "JPEG", quality=q, subsampling=2)
            size.append(b.tell())
            ps.append(psnr(ry, luma(Image.open(b))))
        by_quality[q] = (float(np.mean(ps)), float(np.mean(size)))
    target = float(np.mean(burst))
    q = min(by_quality, key=lambda k: abs(by_quality[k][0] - target))
    print(json.dumps({"videos": len(args.match), "frames": len(refs), "qv": args.qv, "burst_psnr_y": round(target, 2),
                      "burst_bytes": round(float(np.mean(burst_bytes))), "table_quality": tables, "matched_quality": q,
                      "matched_psnr_y": round(by_quality[q][0], 2), "matched_bytes": round(by_quality[q][1]),
                      "q95_psnr_y": round(by_quality[95][0], 2), "q95_bytes": round(by_quality[95][1])}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="the set's folder, or with --loop the video's file")
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--photos", type=int, default=12, help="how many photos the videos pan over")
    ap.add_argument("--preset", default="veryfast", help="libx264's preset")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="ffmpeg processes at a time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--loop", help="make one long video of this one looped (--seconds long) instead")
    ap.add_argument("--match", nargs="+", help="print the libjpeg quality matching mjpeg -q:v QV on these videos instead")
    ap.add_argument("--qv", type=int, default=2, help="with --match: ffmpeg's mjpeg -q:v")
    ap.add_argument("--frames", type=int, default=10, help="with --match: frames compared a video (every 30th)")
    args = ap.parse_args()
    args.classes = max(1, min(args.classes, len(CLASSES)))
    if args.match:
        match(args)
    elif not args.out:
        ap.error("--out is needed")
    elif args.loop:
        make_loop(args)
    else:
        make_set(args)


if __name__ == "__main__":
    main()
