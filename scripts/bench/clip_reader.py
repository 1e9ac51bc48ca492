#!/usr/bin/python3
"""Reads video clips as a clip loader does, and prints what it got as JSON: THREADS readers each take
the next clip of a seeded random order and read its frames in name order, every frame (`all`) or
8 spread over the clip as TSN and TSM take them (`sparse`: the middle frame of 8 equal segments),
for at most SECONDS (then the clips done so far count).

  clip_reader.py frames ROOT LIST   # LIST: clip folders relative to ROOT, one a line (rawframes);
                                    # --names-from DIR: the frames' names from DIR's clip folders
                                    # instead of listing ROOT's (a loader that builds the paths, as
                                    # mmaction2's RawFrameDecode does from total_frames)
  clip_reader.py gulp INDEX         # chunk files of concatenated frames: one pread a clip, as
                                    # GulpIO reads (--direct: with O_DIRECT, the clip's pages
                                    # around it, as the mount reads its store)
  clip_reader.py make-gulp ROOT LIST OUT   # writes those chunk files (100 clips each, every
                                    # frame 4-byte aligned, as GulpIO's) and OUT/index.json
  options: --threads 4 --seed 0 --seconds 20 --frames all|sparse --direct
"""
import argparse
import json
import mmap
import os
import random
import re
import threading
import time


def natural_key(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def sparse(n, segments=8):
    """The middle frame of each of `segments` equal segments (all of them for a shorter clip)."""
    if n <= segments:
        return list(range(n))
    return [int((k + 0.5) * n / segments) for k in range(segments)]


def frames_reader(root, which, names_from=None):
    def read_clip(clip):
        folder = os.path.join(root, clip)
        names = sorted(os.listdir(os.path.join(names_from, clip) if names_from else folder), key=natural_key)
        picked = range(len(names)) if which == "all" else sparse(len(names))
        total = 0
        for i in picked:
            with open(os.path.join(folder, names[i]), "rb") as f:
                total += len(f.read())
        return total
    return read_clip


def gulp_reader(index, direct):
    chunks = {}
    lock = threading.Lock()

    def fd_of(path):
        with lock:
            if path not in chunks:
                chunks[path] = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
            return chunks[path]

    def read_clip(clip):
        entry = index["clips"][clip]
        if not direct:
            data = os.pread(fd_of(entry["chunk"]), entry["bytes"], entry["offset"])  # the whole clip: one read
            assert len(data) == entry["bytes"]
            return len(data)
        start, end = entry["offset"] // 4096 * 4096, -(-(entry["offset"] + entry["bytes"]) // 4096) * 4096
        buf = mmap.mmap(-1, end - start)  # page-aligned, as O_DIRECT needs
        got = os.preadv(fd_of(entry["chunk"]), [buf], start)
        assert got >= entry["offset"] + entry["bytes"] - start
        buf.close()
        return entry["bytes"]
    return read_clip


def make_gulp(root, listing, out, per_chunk=100):
    with open(listing) as f:
        clips = [line.rstrip("\n") for line in f if line.strip()]
    os.makedirs(out, exist_ok=True)
    index = {"clips": {}}
    for c0 in range(0, len(clips), per_chunk):
        chunk = os.path.join(out, f"chunk_{c0 // per_chunk:05d}.bin")
        with open(chunk, "wb") as w:
            for clip in clips[c0:c0 + per_chunk]:
                start = w.tell()
                folder = os.path.join(root, clip)
                for name in sorted(os.listdir(folder), key=natural_key):
                    with open(os.path.join(folder, name), "rb") as f:
                        data = f.read()
                    w.write(data + b"\0" * (-len(data) % 4))
                index["clips"][clip] = {"chunk": chunk, "offset": start, "bytes": w.tell() - start}
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("frames", "gulp", "make-gulp"))
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--frames", choices=("all", "sparse"), default="all")
    ap.add_argument("--direct", action="store_true", help="gulp: read with O_DIRECT")
    ap.add_argument("--names-from", help="frames: take the frames' names from this folder's clips, not a listing")
    a = ap.parse_args()
    if a.mode == "make-gulp":
        return make_gulp(*a.paths)
    if a.mode == "frames":
        root, listing = a.paths
        with open(listing) as f:
            clips = [line.rstrip("\n") for line in f if line.strip()]
        read_clip = frames_reader(root, a.frames, a.names_from)
    else:
        with open(a.paths[0]) as f:
            index = json.load(f)
        clips = sorted(index["clips"])
        read_clip = gulp_reader(index, a.direct)
    random.Random(a.seed).shuffle(clips)
    nxt, done, total_bytes = [0], [0], [0]
    lock = threading.Lock()
    t0 = time.monotonic()
    deadline = t0 + a.seconds

    def worker():
        while time.monotonic() < deadline:
            with lock:
                if nxt[0] >= len(clips):
                    return
                clip = clips[nxt[0]]
                nxt[0] += 1
            b = read_clip(clip)
            with lock:
                done[0] += 1
                total_bytes[0] += b

    threads = [threading.Thread(target=worker) for _ in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    print(json.dumps({"clips": done[0], "seconds": secs, "clips_per_s": done[0] / secs, "bytes": total_bytes[0]}))


if __name__ == "__main__":
    main()
