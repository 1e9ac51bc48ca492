#!/usr/bin/env python3
"""The fault soak (scripts/bench/soak.sh runs it): a mount of an s3:// store (Ceph RGW, from
scripts/s3-server.sh) through the fault proxy, read by READERS threads in random order with level
changes and page-cache drops, while the proxy injects a fault every few seconds (connection resets,
503 storms, trickles, corrupted transfers, a 30 s outage). Then the faults stop and the readers go
on. Reports: reads, wrong bytes (a read must equal the file at some level), failed reads while
the faults ran and after they ended, the daemon's RSS (start, peak, end), and how long the daemon
takes to exit on SIGTERM while a read is held by a trickling server.

  soak.py --bin FIDELITYFS --store DIR --work DIR [--minutes 10] [--quiet-minutes 1.5] [--readers 8]
"""
import argparse
import hashlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
import remote_servers  # noqa: E402
from fidstore import Store  # noqa: E402

BUCKET = "fid-soak"
XA = "user.fidelity.scan_group"


def valid_digests(st):
    """{rel: digests of the file at every level}: a read racing a level change may get either."""
    out = {}
    for rel, f in st.files.items():
        levels = range(1, st.levels + 1) if f["kind"] == "jpeg" else [None]
        out[rel] = {hashlib.sha256(st.read(rel, k)).digest() for k in levels}
    return out


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.reads = self.wrong = self.failed_during = self.failed_after = 0

    def add(self, ok, wrong, quiet):
        with self.lock:
            self.reads += 1
            self.wrong += wrong
            if not ok:
                if quiet:
                    self.failed_after += 1
                else:
                    self.failed_during += 1


def reader(mnt, rels, valid, tally, stop, quiet, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        rel = rng.choice(rels)
        after = quiet.is_set()  # a read counts as "after the faults" only if it started after them
        try:
            with open(os.path.join(mnt, rel), "rb") as f:
                data = f.read()
            tally.add(True, hashlib.sha256(data).digest() not in valid[rel], after)
        except OSError:
            tally.add(False, 0, after)


def churn(mnt, dirs, levels, stop, seed):
    """Level changes on random folders and page-cache drops, so that reads keep reaching the daemon."""
    rng = random.Random(seed)
    while not stop.wait(2.0):
        try:
            os.setxattr(os.path.join(mnt, rng.choice(dirs)), XA, str(rng.randint(1, levels)).encode())
        except OSError:
            pass
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")


def drive_faults(proxy, until, outage_at, seed, log):
    """A fault every 3-6 s until `until`, and one 30 s outage (every connection reset) at outage_at."""
    rng = random.Random(seed)
    faults = [("reset", dict(p=0.3)), ("status", dict(code=503, count=40)), ("trickle", dict(rate=2, count=3)),
              ("corrupt", dict(count=5)), ("truncate", dict(count=5)), ("stall", dict(seconds=8, count=2))]
    outage_done = False
    while time.monotonic() < until:
        if not outage_done and time.monotonic() >= outage_at:
            proxy.set("reset", at="request")
            log("outage: every request reset for 30 s")
            time.sleep(min(30, max(0, until - time.monotonic())))
            outage_done = True
        mode, params = rng.choice(faults)
        proxy.set(mode, match="/records/", **params)
        time.sleep(rng.uniform(3, 6))
    proxy.set("none")


def rss_sampler(pid, samples, stop):
    while not stop.wait(0.5):
        try:
            with open(f"/proc/{pid}/status") as f:
                samples.append(next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")))
        except (OSError, StopIteration):
            return


def sigterm_during_trickle(mnt, rels, proxy, pid):
    """Seconds from SIGTERM to the daemon's exit while reads are held by a trickling server."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    proxy.set("trickle", rate=2, match="/records/")
    proxy.reset_stats()

    def held(rel):
        try:
            with open(os.path.join(mnt, rel), "rb") as f:
                f.read()
        except OSError:
            pass
    for rel in random.Random(5).sample(rels, 8):
        threading.Thread(target=held, args=(rel,), daemon=True).start()
    if not proxy.wait_fault(60):
        return None
    fd = os.pidfd_open(pid)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    ready, _, _ = select.select([fd], [], [], 60)
    return time.monotonic() - t0 if ready else float("inf")


def soak(args, url, proxy, env, log):
    st = Store(args.store)
    rels, valid = sorted(st.files), valid_digests(st)
    mnt = os.path.join(args.work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    opts = f"endpoint={proxy.url},threads=16,cache=32MiB,random_reads=pieces"
    subprocess.run([args.bin, "mount", url, mnt, "-o", opts], env=env, check=True)
    try:
        pid = json.load(open(os.path.join(mnt, ".fidelity", "stats")))["pid"]
        tally, stop, quiet, rss = Tally(), threading.Event(), threading.Event(), []
        threads = [threading.Thread(target=reader, args=(mnt, rels, valid, tally, stop, quiet, i), daemon=True)
                   for i in range(args.readers)]
        threads.append(threading.Thread(target=churn, args=(mnt, [""] + st.all_dirs(), st.levels, stop, 99), daemon=True))
        threads.append(threading.Thread(target=rss_sampler, args=(pid, rss, stop), daemon=True))
        for t in threads:
            t.start()
        t0 = time.monotonic()
        faults_end = t0 + args.minutes * 60 - args.quiet_minutes * 60
        drive_faults(proxy, faults_end, t0 + (faults_end - t0) / 2, 7, log)
        log(f"faults stopped after {time.monotonic() - t0:.0f} s; reads go on for {args.quiet_minutes} min")
        quiet.set()
        stop.wait(args.quiet_minutes * 60)  # the quiet phase's length, not a wait for readiness
        stop.set()
        for t in threads:
            t.join(60)
        stats = json.load(open(os.path.join(mnt, ".fidelity", "stats")))
        took = sigterm_during_trickle(mnt, rels, proxy, pid)
    finally:
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    return tally, rss, stats, took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--quiet-minutes", type=float, default=1.5)
    ap.add_argument("--readers", type=int, default=8)
    args = ap.parse_args()
    log = lambda m: print(f"soak: {m}", file=sys.stderr, flush=True)  # noqa: E731
    with remote_servers.s3_server(os.path.join(args.work, "s3")) as env, remote_servers.exported(env):
        remote_servers.aws(env, "s3", "mb", f"s3://{BUCKET}")
        url = f"s3://{BUCKET}/soak"
        remote_servers.aws(env, "s3", "cp", "--recursive", "--only-show-errors", os.path.join(args.store, "records"),
                           url + "/records")
        remote_servers.aws(env, "s3", "cp", "--only-show-errors", os.path.join(args.store, "index.sqlite"),
                           url + "/index.sqlite")
        host, port = env["AWS_ENDPOINT_URL"].split("//")[1].split(":")
        with remote_servers.fault_proxy(host, int(port)) as proxy:
            menv = dict(os.environ, XDG_CACHE_HOME=os.path.join(args.work, "xdg"))
            log(f"mounting {url} through the fault proxy for {args.minutes} min")
            tally, rss, stats, took = soak(args, url, proxy, menv, log)
    kb = lambda v: f"{v / 1024:.1f} MiB"  # noqa: E731
    print(f"fault soak: {args.minutes:g} min, {args.readers} readers, s3:// through the fault proxy "
          f"(faults for {args.minutes - args.quiet_minutes:g} min, then none for {args.quiet_minutes:g})")
    print(f"reads {tally.reads}, wrong bytes in {tally.wrong}, failed while faults ran {tally.failed_during}, "
          f"failed after they ended {tally.failed_after}")
    print(f"storage requests {stats['storage_reads']}, retries {stats['storage_retries']}, "
          f"eio_errors {stats['eio_errors']}, level changes {stats['level_changes']}")
    print(f"daemon RSS: start {kb(rss[0]) if rss else '?'}, peak {kb(max(rss)) if rss else '?'}, "
          f"end {kb(rss[-1]) if rss else '?'}")
    print(f"SIGTERM during a trickle: daemon exited in {took:.2f} s" if took is not None else
          "SIGTERM during a trickle: no read reached the trickle")
    ok = tally.wrong == 0 and tally.failed_after == 0 and took is not None and took < 2
    print("verdict: " + ("met" if ok else "NOT met") + " (0 wrong, 0 failed after the faults, SIGTERM < 2 s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
