"""Load on one mount with a small record cache, in both random_reads modes and both record layouts
(a file-layout store for a shorter time): reader threads (the live tree and the
/.fidelity/sg/K views), DataLoader-style reader processes (published order, one rank each), level
flips on files and folders, and readers of the control folder, all at once for a bounded time.

Every file read must be one level's complete file (bytes checked against fidstore, an independent
reader of the store), nothing may fail or hang, and the daemon's peak RSS must stay within the
index, the cache budget and a fixed allowance. The figures are printed and repeated in the run's
summary (conftest.report)."""
import errno
import json
import multiprocessing
import os
import queue
import random
import signal
import threading
import time

import pytest
import xxhash

import remote_servers
from conftest import pack, report
from fidstore import Store
from mountutil import daemon_pid, flip_level, mounted, proc_status, read_file, wait_exit

SECONDS = float(os.environ.get("FIDELITYFS_STRESS_SECONDS", "15"))  # bounded load phase
FILE_SECONDS = min(SECONDS, 5.0)  # the same load on a file-layout store: shorter, both modes
GRACE = 30  # seconds past the load phase after which a reader that has not returned is hung
MiB = 1 << 20
WORKERS = 8  # -o threads: FUSE worker threads
CACHE = 4 * MiB  # -o cache: about four 1 MiB records of imagenet_store at full level
LIVE_READERS, VIEW_READERS, FLIPPERS, PROCESSES = 3, 2, 2, 3

# The daemon's memory bound, beyond the index and the cache budget:
FIXED = 16 * MiB  # code, shared libraries, libc/libstdc++/allocator state (an idle daemon: ~4 MiB)
STACK = 256 << 10  # stack touched per daemon thread (8 MiB reserved each, not resident)
FUSE_BUF = MiB + 4096  # libfuse's receive buffer per worker: FUSE's largest request + header
OTHER_THREADS = 4  # main, deferred invalidations, two prefetchers
# Over FUSE over io_uring a thread a ring entry serves beside the /dev/fuse workers (whose buffers
# then stay nearly untouched: the entries' payload buffers take their place).
RING_THREADS = WORKERS if os.environ.get("FIDELITYFS_TEST_TRANSPORT") == "uring" else 0


def digest(data):
    return xxhash.xxh3_128_digest(data)


def expected_digests(st):
    """rel -> {digest of the file at a level: level (0 for a blob)} for JPEGs and blobs (an l3
    file reads as decoded pixels, checked in test_l3.py)."""
    exp = {}
    for rel, f in st.files.items():
        if f["kind"] == "jpeg":
            exp[rel] = {digest(b): k for k, b in enumerate(st.all_levels(rel), 1)}
        elif f["kind"] == "blob":
            exp[rel] = {digest(st.all_levels(rel)[0]): 0}
    return exp


class Tally:
    def __init__(self):
        self.reads, self.n_errors, self.errors, self.latencies = 0, 0, [], []

    def error(self, msg):
        self.n_errors += 1
        if len(self.errors) < 20:
            self.errors.append(msg)

    def read(self, path, rel, levels, want=None, chunk=0):
        """open + read all + close of path, timed; the bytes must be `rel` at level `want`, or
        at any level when want is None."""
        t0 = time.perf_counter()
        try:
            data = read_file(path, chunk)
        except OSError as e:
            self.error(f"{path}: {e}")
            return
        self.latencies.append(time.perf_counter() - t0)
        self.reads += 1
        got = levels.get(digest(data))
        if got is None:
            self.error(f"{rel}: {len(data)} bytes match no level")
        elif want is not None and got not in (want, 0):
            self.error(f"{rel}: level {got} read from the level-{want} view")


def loader_worker(mnt, rank, world, deadline, exp, view_level, results):
    """One DataLoader worker: reads its rank's share of each epoch's published order, the live
    tree (any level: others flip them) or a fixed-level view, until the deadline."""
    t = Tally()
    epoch = 0
    try:
        while time.monotonic() < deadline:
            order = read_file(os.path.join(mnt, ".fidelity", "order", f"epoch-{epoch}.rank-{rank}-of-{world}"))
            for rel in order.decode("utf-8", "surrogateescape").splitlines():
                if time.monotonic() >= deadline:
                    break
                if rel in exp:
                    base = os.path.join(mnt, ".fidelity", "sg", str(view_level)) if view_level else mnt
                    t.read(os.path.join(base, rel), rel, exp[rel], view_level or None)
            epoch += 1
    except Exception as e:  # reported as an error, never a hang
        t.error(f"worker {rank}: {e!r}")
    results.put((rank, t.reads, t.n_errors, t.errors, t.latencies))


@pytest.fixture(scope="module")
def imagenet_file_store(imagenet_tree, tmp_path_factory):
    """imagenet_store in the file layout (docs/FORMAT.md "Record files"): same source, records size."""
    return pack(imagenet_tree, str(tmp_path_factory.mktemp("stores") / "imagenet-file"), "--record-bytes", "1MiB",
                "--layout", "file")


@pytest.mark.parametrize("random_reads,layout", [
    pytest.param("pieces", "scan", id="pieces"),
    pytest.param("records", "scan", id="records"),
    pytest.param("pieces", "file", id="file-pieces"),
    pytest.param("records", "file", id="file-records"),
])
def test_stress_readers_flips_and_control_files(request, mnt, random_reads, layout):
    store = request.getfixturevalue("imagenet_store" if layout == "scan" else "imagenet_file_store")
    seconds = SECONDS if layout == "scan" else FILE_SECONDS
    st = Store(store)
    assert st.layout == layout
    exp = expected_digests(st)
    rels = sorted(exp)
    jpegs = [r for r in rels if st.files[r]["kind"] == "jpeg"]
    dirs = [""] + st.all_dirs()  # "" is the mount root
    listing = {d: set() for d in dirs}
    for rel in list(st.files) + st.all_dirs():
        listing[os.path.dirname(rel)].add(os.path.basename(rel))
    largest = max(len(st.all_levels(r)[-1]) for r in st.files)
    has_l3 = any(f["kind"] == "l3" for f in st.files.values())
    ctx = multiprocessing.get_context("fork")  # as DataLoader; forked before any thread starts

    with mounted(store, mnt, "-o", f"threads={WORKERS},cache={CACHE},scan_group=5,random_reads={random_reads}"):
        pid = daemon_pid(mnt)
        idle_rss = proc_status(pid, "VmRSS")
        results = ctx.Queue()
        t_start = time.monotonic()
        deadline = t_start + seconds
        procs = [ctx.Process(target=loader_worker, daemon=True,
                             args=(mnt, r, PROCESSES, deadline, exp, 3 if r == 1 else 0, results))
                 for r in range(PROCESSES)]
        for p in procs:
            p.start()

        tallies, flips, control_reads = [], [0], [0]

        def live_reader(seed):
            rng, t = random.Random(seed), Tally()
            tallies.append(t)
            while time.monotonic() < deadline:
                rel = rng.choice(rels)
                t.read(os.path.join(mnt, rel), rel, exp[rel], chunk=4096 if rng.random() < 0.3 else 0)

        def view_reader(seed):
            rng, t = random.Random(seed), Tally()
            tallies.append(t)
            while time.monotonic() < deadline:
                rel, k = rng.choice(rels), rng.randint(1, st.levels)
                t.read(os.path.join(mnt, ".fidelity", "sg", str(k), rel), rel, exp[rel], k)

        def flipper(seed):
            rng, t = random.Random(seed), Tally()
            tallies.append(t)
            while time.monotonic() < deadline:
                try:
                    flip_level(mnt, rng, jpegs, dirs, st.levels)
                    flips[0] += 1
                except OSError as e:
                    t.error(f"flip: {e}")

        def control_reader(seed):
            rng, t = random.Random(seed), Tally()
            tallies.append(t)
            ctl = os.path.join(mnt, ".fidelity")
            while time.monotonic() < deadline:
                try:
                    stats = json.loads(read_file(os.path.join(ctl, "stats")))
                    if stats["files"] != len(st.files) or stats["eio_errors"] != 0:
                        t.error(f"stats: {stats['files']} files, {stats['eio_errors']} EIO")
                    if json.loads(read_file(os.path.join(ctl, "config")))["levels"] != st.levels:
                        t.error("config: wrong levels")
                    d = rng.choice(dirs)
                    if set(os.listdir(os.path.join(mnt, d))) != listing[d]:
                        t.error(f"listing of '{d}' differs")
                    order = read_file(os.path.join(ctl, "order", f"epoch-{rng.randint(0, 9)}")).splitlines()
                    if sorted(order) != sorted(r.encode("utf-8", "surrogateescape") for r in st.files):
                        t.error("an order file does not list every file once")
                    control_reads[0] += 4
                except (OSError, ValueError, KeyError) as e:
                    t.error(f"control folder: {e!r}")

        threads = [threading.Thread(target=live_reader, args=(i,), daemon=True) for i in range(LIVE_READERS)]
        threads += [threading.Thread(target=view_reader, args=(10 + i,), daemon=True) for i in range(VIEW_READERS)]
        threads += [threading.Thread(target=flipper, args=(20 + i,), daemon=True) for i in range(FLIPPERS)]
        threads += [threading.Thread(target=control_reader, args=(30,), daemon=True)]
        for t in threads:
            t.start()

        # Hard timeouts: whatever is not back by then is hung.
        for t in threads:
            t.join(timeout=max(0.0, deadline + GRACE - time.monotonic()))
        hung = [t.name for t in threads if t.is_alive()]
        done = []
        try:
            for _ in procs:
                done.append(results.get(timeout=max(0.1, deadline + GRACE - time.monotonic())))
        except queue.Empty:
            pass
        for p in procs:
            p.join(timeout=max(0.1, deadline + GRACE - time.monotonic()))
            if p.is_alive():
                hung.append(f"process {p.pid}")
                p.kill()
        elapsed = time.monotonic() - t_start
        assert not hung, f"hung (deadlock?): {hung}"
        assert len(done) == PROCESSES, "a reader process returned no result"

        stats = json.loads(read_file(os.path.join(mnt, ".fidelity", "stats")))
        peak_rss = proc_status(pid, "VmHWM")

    reads = sum(t.reads for t in tallies) + sum(d[1] for d in done)
    errors = sum(t.n_errors for t in tallies) + sum(d[2] for d in done)
    messages = [m for t in tallies for m in t.errors] + [m for d in done for m in d[3]]
    lat = sorted([x for t in tallies for x in t.latencies] + [x for d in done for x in d[4]])
    p50, p99 = lat[(len(lat) - 1) // 2], lat[int(0.99 * (len(lat) - 1))]
    index_bytes = os.path.getsize(os.path.join(store, "index.sqlite"))
    views = max(CACHE, 8 * MiB) if has_l3 else 0  # the l3 view cache (at most `cache`), only used by l3 files
    per_worker = FUSE_BUF + 3 * largest  # + the reply, piece and O_DIRECT scratch buffers
    bound = FIXED + index_bytes + CACHE + views + WORKERS * per_worker + (WORKERS + RING_THREADS + OTHER_THREADS) * STACK
    report(f"stress ({random_reads}, {layout} layout): {reads} file reads in {elapsed:.1f} s, "
           f"{reads / elapsed:.0f} reads/s ({sum(d[1] for d in done)} by {PROCESSES} processes), open+read+close "
           f"p50 {p50 * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms, {errors} errors; {flips[0]} level flips, "
           f"{control_reads[0]} control-folder reads; the daemon answered {stats['reads']} FUSE reads and "
           f"{stats['lookups']} lookups (the rest hit the page cache), cache peak "
           f"{stats['cache']['peak'] / MiB:.1f} of {CACHE / MiB:.0f} MiB")
    report(f"stress ({random_reads}, {layout} layout): daemon peak RSS {peak_rss / MiB:.1f} MiB "
           f"(idle {idle_rss / MiB:.1f}) <= bound {bound / MiB:.1f} MiB = {FIXED / MiB:.0f} fixed + "
           f"{index_bytes / MiB:.2f} index + {CACHE / MiB:.0f} cache + {views / MiB:.0f} views + {WORKERS} workers x "
           f"{per_worker / MiB:.2f} + {WORKERS + RING_THREADS + OTHER_THREADS} stacks x {STACK / MiB:.2f}")
    assert errors == 0, messages[:10]
    assert all(d[1] > 0 for d in done), "a reader process read nothing"
    assert reads > 1000 and flips[0] > 100 and control_reads[0] > 0
    assert stats["eio_errors"] == 0
    assert stats["cache"]["peak"] <= CACHE and stats["cache"]["budget"] == CACHE
    assert stats["cache_hits"] > 0, "the published-order readers never hit the record cache"
    assert stats["random_reads"]["mode"] == random_reads and stats["layout"] == layout
    if random_reads == "records":
        assert stats["random_reads"]["loads"] > 0, "no random reader loaded a record"
    assert peak_rss <= bound, f"daemon peak RSS {peak_rss} > bound {bound}"


TSAN_SECONDS = 10  # the load phase under ThreadSanitizer (its daemon runs several times slower)
TSAN_RSS_FACTOR = 8  # TSan's shadow memory and its own allocator: the bound above, scaled


@pytest.mark.skipif(not os.environ.get("FIDELITYFS_TSAN_BIN"),
                    reason="needs the ThreadSanitizer build of the daemon (FIDELITYFS_TSAN_BIN; scripts/test.sh makes it)")
def test_stress_under_thread_sanitizer(imagenet_store, mnt, tmp_path):
    """The daemon built with ThreadSanitizer, over a remote store (nginx behind the fault proxy,
    which resets connections) with a disk cache and random_reads=records, under readers, loader
    processes, level flips and unlink/rename attempts: every read is one level's file, every
    removal EROFS, and TSan reports nothing (its reports would be files in the log folder), up to
    and including the daemon's end on SIGTERM."""
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    st = Store(imagenet_store)
    exp = expected_digests(st)
    rels = sorted(exp)
    jpegs = [r for r in rels if st.files[r]["kind"] == "jpeg"]
    dirs = [""] + st.all_dirs()
    logs = tmp_path / "tsan"
    logs.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"),
               TSAN_OPTIONS=f"log_path={logs}/report halt_on_error=0 second_deadlock_stack=1")
    ctx = multiprocessing.get_context("fork")
    opts = (f"threads={WORKERS},cache={CACHE},scan_group=5,random_reads=records,"
            f"disk_cache={tmp_path / 'disk'},disk_cache_size=64MiB")
    with remote_servers.http_server(os.path.dirname(imagenet_store)) as srv, \
            remote_servers.fault_proxy(srv.host, srv.port, seed=11) as proxy:
        src = f"{proxy.url}/{os.path.basename(imagenet_store)}"
        argv = [os.environ["FIDELITYFS_TSAN_BIN"], "mount", src, mnt, "-o", opts]
        with mounted(src, mnt, argv=argv, env=env):
            pid = daemon_pid(mnt)
            proxy.set("reset", p=0.1)
            results = ctx.Queue()
            deadline = time.monotonic() + TSAN_SECONDS
            procs = [ctx.Process(target=loader_worker, daemon=True, args=(mnt, r, 2, deadline, exp, 0, results))
                     for r in range(2)]
            for p in procs:
                p.start()
            tallies, flips, refusals = [], [0], [0]

            def reader(seed):
                rng, t = random.Random(seed), Tally()
                tallies.append(t)
                while time.monotonic() < deadline:
                    rel = rng.choice(rels)
                    t.read(os.path.join(mnt, rel), rel, exp[rel], chunk=4096 if rng.random() < 0.3 else 0)

            def flipper(seed):
                rng, t = random.Random(seed), Tally()
                tallies.append(t)
                while time.monotonic() < deadline:
                    try:
                        flip_level(mnt, rng, jpegs, dirs, st.levels)
                        flips[0] += 1
                    except OSError as e:
                        t.error(f"flip: {e}")

            def remover(seed):
                rng, t = random.Random(seed), Tally()
                tallies.append(t)
                while time.monotonic() < deadline:
                    rel = rng.choice(jpegs)
                    path, folder = os.path.join(mnt, rel), os.path.join(mnt, os.path.dirname(rel))
                    for act in (lambda: os.unlink(path), lambda: os.rename(path, path + ".x"),
                                lambda: os.rmdir(folder)):
                        try:
                            act()
                            t.error(f"{rel}: a removal succeeded")
                        except OSError as e:
                            if e.errno != errno.EROFS:
                                t.error(f"{rel}: removal: {e}")
                        refusals[0] += 1

            threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
            threads += [threading.Thread(target=flipper, args=(20 + i,), daemon=True) for i in range(2)]
            threads += [threading.Thread(target=remover, args=(40,), daemon=True)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=max(0.0, deadline + GRACE - time.monotonic()))
            hung = [t.name for t in threads if t.is_alive()]
            done = []
            try:
                for _ in procs:
                    done.append(results.get(timeout=max(0.1, deadline + GRACE - time.monotonic())))
            except queue.Empty:
                pass
            for p in procs:
                p.join(timeout=max(0.1, deadline + GRACE - time.monotonic()))
                if p.is_alive():
                    hung.append(f"process {p.pid}")
                    p.kill()
            proxy.set("none")
            assert not hung, f"hung (deadlock?): {hung}"
            faults = proxy.stats()["faults"]
            stats = json.loads(read_file(os.path.join(mnt, ".fidelity", "stats")))
            peak_rss = proc_status(pid, "VmHWM")
            os.kill(pid, signal.SIGTERM)  # the shutdown path too, under TSan
            assert wait_exit(pid, 60), "the daemon did not end after SIGTERM"
    found = sorted(logs.iterdir())
    assert not found, "ThreadSanitizer reports:\n" + "\n".join(f.read_text()[:6000] for f in found[:3])
    reads = sum(t.reads for t in tallies) + sum(d[1] for d in done)
    errors = sum(t.n_errors for t in tallies) + sum(d[2] for d in done)
    messages = [m for t in tallies for m in t.errors] + [m for d in done for m in d[3]]
    index_bytes = os.path.getsize(os.path.join(imagenet_store, "index.sqlite"))
    bound = TSAN_RSS_FACTOR * (FIXED + index_bytes + CACHE + WORKERS * (FUSE_BUF + 3 * 2 * MiB))
    report(f"stress under ThreadSanitizer (remote, disk cache, records, resets): {reads} file reads in "
           f"{TSAN_SECONDS} s, {flips[0]} level flips, {refusals[0]} unlink/rename/rmdir refused, {faults} connection "
           f"resets, {stats['storage_retries']} retries, daemon peak RSS {peak_rss / MiB:.0f} MiB "
           f"(bound {bound / MiB:.0f}); 0 TSan reports")
    assert len(done) == 2 and errors == 0, messages[:10]
    assert reads > 100 and flips[0] > 20 and refusals[0] > 20 and faults > 0
    assert stats["eio_errors"] == 0 and stats["random_reads"]["mode"] == "records"
    assert peak_rss <= bound, f"daemon peak RSS {peak_rss} > {bound}"
