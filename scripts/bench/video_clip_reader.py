#!/usr/bin/python3
"""Reads clips of videos as a training loader does, decoded into RGB arrays, and prints what it cost
as JSON: PROCS reader processes (forked), each taking its share of a planned list of clips (clip i
to process i % PROCS), each clip's frames decoded and stacked into one (frames, H, W, 3) uint8 array.

  video_clip_reader.py plan SET OUT.json [--clips 4] [--seed 0]
      the clips of every video of SET (its .mp4 .webm .mkv .avi .mov files; frames counted by
      ffprobe), CLIPS of each kind a video, in one seeded order (the same for every contender):
        consecutive  32 consecutive frames at a random start, each video's clips in disjoint
                     slots of the video (no frame shared);
        tsn          8 frames, one from each of 8 equal segments of the video (TSN), each clip's
                     frame drawn from its own part of the segment (no frame shared).
  video_clip_reader.py pyav SET PLAN.json --kind consecutive|tsn [--procs 2]
      as SlowFast's pyav_decode: the container opened for each clip, a seek to the keyframe at or
      before the clip's first frame (container.seek(pts, any_frame=False, backward=True,
      stream=video)), frames decoded until the clip's last one, the clip's frames converted with
      frame.to_ndarray(format="rgb24").
  video_clip_reader.py folders ROOT PLAN.json --kind ... [--procs 2]
      each video V.ext as the folder ROOT/V of one file a frame (a JPEG burst, a mount's clip
      folder: img_00001.jpg, img_00001.ppm ...), listed once per process (names in natural order:
      frame k is the k-th), each frame np.asarray(Image.open(path)), converted to RGB first when it
      is not (JPEG, PPM: as a loader over such a folder does).

The JSON: clips, frames, seconds (wall, from the first fork to the last join), cpu_s (user + system
of the reader processes, from getrusage(RUSAGE_CHILDREN): what they took after the imports, which the
parent does before forking), clips_per_s, shape (of the first clip's array).
"""
import argparse
import json
import multiprocessing
import os
import queue
import random
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clip_reader import natural_key  # noqa: E402  (frame names in the order clip loaders sort them)

VIDEO_EXTS = (".mp4", ".webm", ".mkv", ".avi", ".mov")
CONSECUTIVE, SEGMENTS = 32, 8


def videos_of(root):
    """The videos under root, as paths relative to it, sorted."""
    found = []
    for d, _, files in os.walk(root):
        found += [os.path.relpath(os.path.join(d, f), root) for f in files if f.lower().endswith(VIDEO_EXTS)]
    return sorted(found)


def frame_count(path):
    """The video stream's frames, counted by ffprobe (decoding: right for any container)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=nb_read_frames", "-of", "default=nw=1:nk=1", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def consecutive_clips(n, k, rng):
    """k clips of CONSECUTIVE frames of a video of n frames, in k disjoint slots of it (fewer when
    the video is too short for k)."""
    k = max(1, min(k, n // CONSECUTIVE))
    if n < CONSECUTIVE:
        return [list(range(n))]
    slot = n // k
    starts = [j * slot + rng.randrange(slot - CONSECUTIVE + 1) for j in range(k)]
    return [list(range(s, s + CONSECUTIVE)) for s in starts]


def tsn_clips(n, k, rng):
    """k TSN clips of a video of n frames: one frame from each of SEGMENTS equal segments, clip j's
    frame drawn from the j-th of k equal parts of its segment (so that clips share no frame)."""
    clips = []
    for j in range(k):
        picked = []
        for s in range(SEGMENTS):
            lo, hi = s * n / SEGMENTS, (s + 1) * n / SEGMENTS
            a, b = int(lo + j * (hi - lo) / k), int(lo + (j + 1) * (hi - lo) / k)
            picked.append(min(n - 1, a + rng.randrange(max(1, b - a))))
        clips.append(sorted(set(picked)))
    return clips


def plan(args):
    rng = random.Random(args.seed)
    videos = [{"path": v, "frames": frame_count(os.path.join(args.root, v))} for v in videos_of(args.root)]
    if not videos:
        sys.exit(f"video_clip_reader.py: no videos under {args.root}")
    kinds = {}
    for kind, make in (("consecutive", consecutive_clips), ("tsn", tsn_clips)):
        clips = [[i, c] for i, v in enumerate(videos) for c in make(v["frames"], args.clips, rng)]
        rng.shuffle(clips)
        kinds[kind] = clips
    with open(args.out, "w") as f:
        json.dump({"videos": videos, "kinds": kinds}, f)


def pyav_clip(root):
    import av  # noqa: F401  (imported by main before the fork)

    def read(path, wanted):
        container = av.open(os.path.join(root, path))
        try:
            stream = container.streams.video[0]
            tb, fps, start = stream.time_base, stream.average_rate, stream.start_time or 0
            first, last, want = wanted[0], wanted[-1], set(wanted)
            container.seek(start + int(first / fps / tb), any_frame=False, backward=True, stream=stream)
            frames = []
            for frame in container.decode(stream):
                i = round((frame.pts - start) * tb * fps)
                if i > last:
                    break
                if i in want:
                    frames.append(frame.to_ndarray(format="rgb24"))
        finally:
            container.close()
        if len(frames) != len(wanted):
            raise RuntimeError(f"{path}: decoded {len(frames)} of the clip's {len(wanted)} frames {wanted[:3]}...")
        return frames
    return read


def folder_clip(root):
    from PIL import Image
    listed = {}

    def read(path, wanted):
        folder = os.path.join(root, os.path.splitext(path)[0])
        if folder not in listed:
            listed[folder] = sorted(os.listdir(folder), key=natural_key)
        names = listed[folder]
        if wanted[-1] >= len(names):
            raise RuntimeError(f"{folder}: {len(names)} frames, the clip wants frame {wanted[-1] + 1}")
        frames = []
        for i in wanted:
            img = Image.open(os.path.join(folder, names[i]))
            frames.append(np.asarray(img if img.mode == "RGB" else img.convert("RGB")))
        return frames
    return read


def worker(read, videos, clips, results):
    try:
        shape, frames = None, 0
        for vid, wanted in clips:
            arr = np.stack(read(videos[vid]["path"], wanted))
            frames += arr.shape[0]
            shape = shape or list(arr.shape)
        results.put({"clips": len(clips), "frames": frames, "shape": shape})
    except Exception as e:  # reported by the parent, which then fails
        results.put({"error": f"{type(e).__name__}: {e}"})


def run(args):
    with open(args.plan) as f:
        p = json.load(f)
    clips = p["kinds"][args.kind]
    if args.mode == "pyav":
        import av  # noqa: F401  (before the fork: its import is not a clip's cost)
        read = pyav_clip(args.root)
    else:
        from PIL import Image
        Image.preinit()  # its JPEG and PPM plugins imported before the fork too
        read = folder_clip(args.root)
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    procs = [ctx.Process(target=worker, args=(read, p["videos"], clips[w::args.procs], results))
             for w in range(args.procs)]
    for pr in procs:
        pr.start()
    got = []
    while len(got) < len(procs):
        try:
            got.append(results.get(timeout=1))
        except queue.Empty:  # a reader killed (a signal) reports nothing
            dead = [pr.exitcode for pr in procs if pr.exitcode not in (None, 0)]
            if dead:
                got.append({"error": f"a reader process ended with {dead[0]}"})
                break
    for pr in procs:
        pr.join()
    secs = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    errors = [g["error"] for g in got if "error" in g]
    if errors:
        sys.exit("video_clip_reader.py: " + "; ".join(errors))
    n = sum(g["clips"] for g in got)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(json.dumps({"clips": n, "frames": sum(g["frames"] for g in got), "seconds": secs, "cpu_s": cpu,
                      "clips_per_s": n / secs, "shape": next((g["shape"] for g in got if g["shape"]), None)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("plan", "pyav", "folders"))
    ap.add_argument("root", help="the videos' folder (plan, pyav) or the folders' root (folders)")
    ap.add_argument("plan", help="the plan: written (plan) or read")
    ap.add_argument("--kind", choices=("consecutive", "tsn"), default="consecutive")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--clips", type=int, default=4, help="plan: clips of each kind a video")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.mode == "plan":
        args.out = args.plan
        return plan(args)
    return run(args)


if __name__ == "__main__":
    main()
