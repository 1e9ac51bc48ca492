#!/usr/bin/env python3
"""The mount with gpu=on against gpu=off (scripts/bench/gpu_mount.sh runs it): the PNGs packed once
as L3, then per round a fresh mount (raw_format=npy, threads=16) for each mode, daemon core set
and reader in turns, every file read once: by 16 threads of readbench (whole files) and by 16
Python threads doing np.load. For each it prints files/s, GB/s of views, the daemon's host CPU
per file (user + system, from /proc), views decoded per file (l3_views.renders) and FUSE reads
per file; then medians over the rounds and the ratios of the first mode to the second.

Needs python3 with numpy only (no Debian package): it runs as it is on a machine with a GPU.
  gpu_mount.py PNG_DIR --fidelityfs BIN --readbench BIN [--modes on,off] [--rounds 3]
               [--daemon-cores 4] [--work DIR] [--budget-s 190] [--mount-user NAME]
A mode that does not mount (gpu=on without a device) is replaced by gpu=emulate, said so."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

THREADS = 16


def run(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def daemon_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def stats_of(mnt):
    with open(os.path.join(mnt, ".fidelity", "stats")) as f:
        return json.load(f)


def unmount(mnt):
    if run("fusermount3", "-u", mnt).returncode != 0:
        run("umount", mnt)


def drop_caches():
    """The records come from storage in every run alike where this is allowed (root); otherwise
    from the page cache in every run alike (the first pass warmed it)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def mount(args, store, mnt, mode, cores):
    cmd = [args.fidelityfs, "mount", store, mnt, "-o", f"gpu={mode},raw_format=npy,threads={THREADS}"]
    if args.mount_user:  # a user's mount: its readahead stays at the kernel's 128 KiB
        cmd = ["setpriv", "--reuid", args.mount_user, "--regid", args.mount_user, "--init-groups",
               "env", f"XDG_CACHE_HOME={os.path.join(os.path.dirname(mnt), 'cache')}"] + cmd
        cmd[-1] += ",allow_other"
    if cores:  # the daemon and every thread it starts on the first `cores` CPUs
        cmd = [sys.executable, "-c", "import os, sys; os.sched_setaffinity(0, range(int(sys.argv[1]))); "
               "os.execvp(sys.argv[2], sys.argv[2:])", str(cores)] + cmd
    return run(*cmd)


def read_numpy(paths):
    def load(p):
        return np.load(p).nbytes
    with ThreadPoolExecutor(THREADS) as ex:
        return sum(ex.map(load, paths))


def measure(args, store, mnt, mode, cores, reader, paths, listing):
    drop_caches()
    m = mount(args, store, mnt, mode, cores)
    if m.returncode != 0:
        return None, m.stderr.strip()
    try:
        pid = stats_of(mnt)["pid"]
        cpu0 = daemon_cpu_s(pid)
        t0 = time.monotonic()
        if reader == "readbench":
            r = run(args.readbench, listing, "--threads", str(THREADS), check=True)
            got = json.loads(r.stdout.splitlines()[-1])
            assert got["errors"] == 0, got
            nbytes = got["bytes"]
        else:
            nbytes = read_numpy(paths)
        dt = time.monotonic() - t0
        cpu = daemon_cpu_s(pid) - cpu0
        s = stats_of(mnt)
    finally:
        unmount(mnt)
    n = len(paths)
    return dict(files_s=n / dt, gb_s=nbytes / 1e9 / dt, cpu_ms=cpu * 1e3 / n,
                renders=s["l3_views"]["renders"] / n, reads=s["requests"]["read"] / n), None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("png_dir")
    ap.add_argument("--fidelityfs", required=True)
    ap.add_argument("--readbench", required=True)
    ap.add_argument("--modes", default="on,off")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--daemon-cores", type=int, default=4)
    ap.add_argument("--work", default="")
    ap.add_argument("--budget-s", type=float, default=190)
    ap.add_argument("--mount-user", default="", help="mount as this user (root runs the bench; needs "
                    "user_allow_other in /etc/fuse.conf), as a node where the daemon is not root")
    args = ap.parse_args()
    t_start = time.monotonic()
    work = args.work or tempfile.mkdtemp(prefix="gpu-mount-")
    store, mnt = os.path.join(work, "store"), os.path.join(work, "mnt")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(mnt, exist_ok=True)
    if args.mount_user:  # the user reaches the store, the binary and a cache folder; owns the mount point
        import pwd
        user = pwd.getpwnam(args.mount_user)
        os.chmod(work, 0o755)
        args.fidelityfs = shutil.copy(args.fidelityfs, os.path.join(work, "fidelityfs"))
        os.makedirs(os.path.join(work, "cache"), exist_ok=True)
        for d in (mnt, os.path.join(work, "cache")):
            os.chown(d, user.pw_uid, user.pw_gid)
    p = run(args.fidelityfs, "pack", args.png_dir, store, "--progress", "off")
    if p.returncode != 0:
        sys.exit(f"pack failed: {p.stderr.strip()}")
    print(p.stdout.splitlines()[0], flush=True)

    modes = args.modes.split(",")
    probe = mount(args, store, mnt, modes[0], 0)
    if probe.returncode != 0:
        print(f"gpu={modes[0]} does not mount ({probe.stderr.strip()}): gpu=emulate in its place", flush=True)
        modes[0] = "emulate"
        if mount(args, store, mnt, modes[0], 0).returncode != 0:
            sys.exit("gpu=emulate does not mount either")
    try:  # the l3 files, the ones a GPU decodes
        paths = sorted(p for p in (os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs)
                       if os.getxattr(p, "user.fidelity.kind") == b"l3")
    finally:
        unmount(mnt)
    listing = os.path.join(work, "files.txt")
    with open(listing, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    cores_all = os.cpu_count() or 1
    core_sets = [0] + ([args.daemon_cores] if args.daemon_cores < cores_all else [])
    print(f"{len(paths)} files; {THREADS} readers; modes {' and '.join('gpu=' + m for m in modes)}; daemon on all "
          f"{cores_all} cores" + (f", then on {args.daemon_cores}" if len(core_sets) > 1 else "") +
          f"; {args.rounds} rounds, a fresh mount per run", flush=True)
    print(f"{'round':>5} {'gpu':>7} {'cores':>5} {'reader':>9} {'files/s':>8} {'GB/s':>6} {'daemon CPU ms/file':>18} "
          f"{'renders/file':>12} {'FUSE reads/file':>15}", flush=True)
    results = {}
    for rnd in range(1, args.rounds + 1):
        for cores in core_sets:
            for reader in ("readbench", "np.load"):
                for mode in (modes if rnd % 2 else modes[::-1]):  # each mode goes first in turn
                    if time.monotonic() - t_start > args.budget_s:
                        print(f"stopped at {args.budget_s:.0f} s: the rounds so far are summarised", flush=True)
                        return summarise(results, modes, core_sets, cores_all)
                    r, why = measure(args, store, mnt, mode, cores, reader, paths, listing)
                    if r is None:
                        print(f"{rnd:>5} {mode:>7} {cores or cores_all:>5} {reader:>9} does not mount: {why}", flush=True)
                        continue
                    results.setdefault((mode, cores, reader), []).append(r)
                    print(f"{rnd:>5} {mode:>7} {cores or cores_all:>5} {reader:>9} {r['files_s']:8.1f} {r['gb_s']:6.2f} "
                          f"{r['cpu_ms']:18.2f} {r['renders']:12.2f} {r['reads']:15.2f}", flush=True)
    summarise(results, modes, core_sets, cores_all)


def summarise(results, modes, core_sets, cores_all):
    print("\nmedians over the rounds, and the first mode over the second (files/s; daemon CPU per file)")
    for cores in core_sets:
        for reader in ("readbench", "np.load"):
            med = {}
            for mode in modes:
                runs = results.get((mode, cores, reader))
                if not runs:
                    continue
                med[mode] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                m = med[mode]
                print(f"  gpu={mode:<7} daemon on {cores or cores_all:>2} cores, {reader:>9}: {m['files_s']:7.1f} files/s "
                      f"{m['gb_s']:5.2f} GB/s, daemon CPU {m['cpu_ms']:6.2f} ms/file, {m['renders']:.2f} renders/file, "
                      f"{m['reads']:.1f} FUSE reads/file ({len(runs)} runs)")
            if len(med) == 2:
                a, b = (med[m] for m in modes)
                ratio = lambda k: f"{a[k] / b[k]:.2f}x" if b[k] > 0 else "n/a (0 in the second)"
                print(f"    gpu={modes[0]} / gpu={modes[1]}: files/s {ratio('files_s')}, daemon CPU per "
                      f"file {ratio('cpu_ms')}")


if __name__ == "__main__":
    main()
