#!/usr/bin/python3
"""Reads every file of a list once, in a seeded random order, as a Python training job reads:
`threads`, N threads of one process each doing open(path, 'rb').read() (a DataLoader worker's
threads, a ThreadPoolExecutor); `loader`, a torch DataLoader with N worker processes whose
dataset returns each file's bytes. Prints one JSON line with readbench's keys: files, bytes,
seconds, files_per_s, and the readers' CPU a file (cpu_us_per_file, and its user_us_per_file and
sys_us_per_file), the loader's workers included.
  py_readers.py LIST --mode threads|loader [--threads N] [--seed S]"""
import argparse
import json
import random
import resource
import time
from concurrent.futures import ThreadPoolExecutor


def read(path):
    with open(path, "rb") as f:
        return len(f.read())


def run_threads(paths, n):
    with ThreadPoolExecutor(n) as pool:
        return sum(pool.map(read, paths, chunksize=16))


def run_loader(paths, n):
    import torch.utils.data as tud

    class Files(tud.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            return read(paths[i])
    loader = tud.DataLoader(Files(), batch_size=32, num_workers=n, collate_fn=sum)
    return sum(loader)


def cpu_us():
    """User and system CPU of this process and its reaped children (the loader's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + kids.ru_utime) * 1e6, (me.ru_stime + kids.ru_stime) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("list")
    ap.add_argument("--mode", choices=["threads", "loader"], required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with open(a.list) as f:
        paths = [line.rstrip("\n") for line in f if line.strip()]
    random.Random(a.seed).shuffle(paths)
    if a.mode == "loader":
        import torch.utils.data  # noqa: F401 (imported before the clock starts)
    u0, s0 = cpu_us()
    t0 = time.perf_counter()
    total = run_threads(paths, a.threads) if a.mode == "threads" else run_loader(paths, a.threads)
    seconds = time.perf_counter() - t0
    u1, s1 = cpu_us()
    n = len(paths)
    print(json.dumps({"files": n, "bytes": total, "seconds": round(seconds, 4), "files_per_s": round(n / seconds, 1),
                      "cpu_us_per_file": round((u1 - u0 + s1 - s0) / n, 3), "user_us_per_file": round((u1 - u0) / n, 3),
                      "sys_us_per_file": round((s1 - s0) / n, 3)}))


if __name__ == "__main__":
    main()
