"""Real mounts of packed stores: tree shape, bytes at every level, decodability, xattrs and their
precedence, the control folder, errors, concurrency with level flips, signals, stale mounts."""
import concurrent.futures
import errno
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest
from PIL import Image

from conftest import REPO, make_tree, fid_bin, manifest, pack, run
from fidstore import Store
from mountutil import (XA, daemon_pid, flip_level, is_mounted, mount, mounted, unmount, wait_exit, wait_invalidations,
                       walk_dirs, walk_files)
from mountutil import read_file as read

STRESS_SECONDS = 6


def decode_pil(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def djpeg_clean(data):
    """True if libjpeg-turbo's djpeg decodes with exit 0 and no warning on stderr."""
    p = subprocess.run(["djpeg", "-outfile", "/dev/null"], input=data, capture_output=True)
    return p.returncode == 0 and not p.stderr, p.stderr.decode(errors="replace")


needs_djpeg = pytest.mark.skipif(shutil.which("djpeg") is None, reason="djpeg not installed")


def test_tree_bytes_and_sizes(edge_tree, edge_store, mnt):
    st = Store(edge_store)
    with mounted(edge_store, mnt):
        # The root listing equals the source's: /.fidelity is never listed.
        assert sorted(os.listdir(mnt)) == sorted(os.listdir(edge_tree))
        assert ".fidelity" not in os.listdir(mnt)
        assert walk_dirs(mnt) == st.all_dirs()
        assert sorted(walk_files(mnt)) == sorted(st.files)
        rows = {r["path"]: r for r in manifest(edge_tree)}
        for rel, meta in st.files.items():
            p = os.path.join(mnt, rel)
            data = read(p)
            assert os.stat(p).st_size == len(data), rel
            if meta["kind"] == "l3":  # a decoded view of the stored L3 payload (pixels: test_l3.py)
                assert st.read(rel)[:4] == b"L3V1", rel
            else:
                assert data == st.read(rel), rel  # full level, checked by an independent reader
            assert os.getxattr(p, "user.fidelity.kind").decode() == meta["kind"]
            if meta["kind"] == "blob":
                assert data == read(os.path.join(edge_tree, rel)), rel
            if meta["kind"] == "jpeg" and rows.get(rel, {}).get("expectation") == "progressive":
                src = Image.open(os.path.join(edge_tree, rel))
                src.load()
                assert decode_pil(data).tobytes() == src.tobytes(), rel


def _mapped_tables(mnt):
    """The tables files the daemon serving mnt has mapped."""
    with open(f"/proc/{daemon_pid(mnt)}/maps") as f:
        return {line.split()[-1] for line in f if line.rstrip().endswith(".tables")}


def test_tables_file_is_made_once_then_mapped(edge_tree, edge_store, tmp_path, mnt):
    st = Store(edge_store)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    tables = tmp_path / "cache" / "fidelityfs" / "tables"
    inodes = []
    for _ in range(2):
        p = mount(edge_store, mnt, env=env)
        try:
            # Nothing on stderr but, on a machine without syslog, where the daemon logs instead.
            log = tmp_path / "cache" / "fidelityfs" / "fidelityfs.log"
            assert p.stderr in ("", f"fidelityfs mount: no syslog on this machine (/dev/log): the daemon logs to "
                                    f"{log} (log.file in a config chooses)\n"), p.stderr
            made = sorted(tables.glob("*.tables"))
            assert len(made) == 1 and made[0].stat().st_mode & 0o777 == 0o600
            assert _mapped_tables(mnt) == {str(made[0])}
            inodes.append(made[0].stat().st_ino)
            assert sorted(walk_files(mnt)) == sorted(st.files)
            for rel, meta in st.files.items():
                if meta["kind"] != "l3":
                    assert read(os.path.join(mnt, rel)) == st.read(rel), rel
        finally:
            unmount(mnt)
    assert inodes[0] == inodes[1], "the second mount maps the first mount's file"
    # No folder for the file: the mount works with its tables in memory, and says so.
    (tmp_path / "not-a-folder").write_text("x")
    p = mount(edge_store, mnt, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "not-a-folder")))
    try:
        assert "warning:" in p.stderr and "stay in the daemon's memory" in p.stderr, p.stderr
        assert _mapped_tables(mnt) == set()
        assert sorted(walk_files(mnt)) == sorted(st.files)
    finally:
        unmount(mnt)


@needs_djpeg
@pytest.mark.parametrize("which", ["edge", "imagenet"])
def test_levels_decode_everywhere(which, request, mnt):
    store = request.getfixturevalue(f"{which}_store")
    st = Store(store)
    jpegs = [r for r, m in st.files.items() if m["kind"] == "jpeg"]
    if which == "imagenet":
        jpegs = jpegs[:120]
    assert jpegs
    with mounted(store, mnt):
        for level in (1, 5, st.levels):
            for rel in jpegs:
                p = os.path.join(mnt, ".fidelity", "sg", str(level), rel)
                data = read(p)
                assert data == st.read(rel, level), (rel, level)
                assert os.stat(p).st_size == len(data)
                decode_pil(data)
                ok, why = djpeg_clean(data)
                assert ok, (rel, level, why)


def test_mount_option_and_config_rules(imagenet_store, tmp_path, mnt):
    st = Store(imagenet_store)
    classes = sorted({r.split("/")[0] for r in st.files})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"scan_group: 2\nrules:\n  - path: \"{classes[0]}/**\"\n    scan_group: 4\n")
    with mounted(imagenet_store, mnt, "-o", f"scan_group=3,config={cfg}"):
        for rel, m in list(st.files.items())[:60]:
            if m["kind"] != "jpeg":
                continue
            want = 4 if rel.startswith(classes[0] + "/") else 3  # rule > mount option > config default
            p = os.path.join(mnt, rel)
            assert read(p) == st.read(rel, want), rel
            assert os.stat(p).st_size == len(st.read(rel, want))
            assert os.getxattr(p, XA) == str(want).encode()
        conf = json.loads(read(os.path.join(mnt, ".fidelity", "config")))
        assert conf["scan_group"] == "3" and conf["rules"][0]["scan_group"] == "4"


@pytest.mark.parametrize("mode", ["plus", "plain", "auto"])
def test_readdir_modes(mode, imagenet_store, mnt):
    """-o readdir=plus|plain|auto: the same tree and bytes whichever way listings are answered;
    with plain READDIR a listing instantiates no file, so the first open of each file is a LOOKUP."""
    st = Store(imagenet_store)
    with mounted(imagenet_store, mnt, "-o", f"readdir={mode}"):
        ctl = os.path.join(mnt, ".fidelity")
        assert json.loads(read(os.path.join(ctl, "config")))["readdir"] == mode
        assert sorted(walk_files(mnt)) == sorted(st.files)
        lookups = json.loads(read(os.path.join(ctl, "stats")))["lookups"]
        for rel in st.files:
            assert read(os.path.join(mnt, rel)) == st.read(rel), rel
        added = json.loads(read(os.path.join(ctl, "stats")))["lookups"] - lookups
        if mode == "plain":
            assert added >= len(st.files)


def connection_limits(mnt):
    """The mount's connection's (max_background, congestion_threshold) from the FUSE control
    filesystem (mounted for the look where it is not, and unmounted again), or None where it
    cannot be mounted."""
    ctl = "/sys/fs/fuse/connections"
    ours = os.path.isdir(ctl) and not os.listdir(ctl)
    if ours and subprocess.run(["mount", "-t", "fusectl", "fusectl", ctl]).returncode != 0:
        return None
    try:
        conn = os.path.join(ctl, str(os.minor(os.stat(mnt).st_dev)))
        if not os.path.isdir(conn):
            return None
        return tuple(int(open(os.path.join(conn, f)).read()) for f in ("max_background", "congestion_threshold"))
    finally:
        if ours:
            subprocess.run(["umount", ctl], check=True)


def test_many_readers_at_once_read_a_file_in_one_read_each(imagenet_store, mnt):
    """The kernel may keep 256 background requests (readahead READs) in flight for the mount,
    congested from 192: under its default (12, congested from 9) a reader that found 9 in flight
    dropped the rest of its readahead and read its file in several READs. 32 readers starting
    together, each reading its own files whole, cost one READ a file."""
    st = Store(imagenet_store)
    rels = sorted(st.files)[:96]
    with mounted(imagenet_store, mnt):
        assert connection_limits(mnt) in (None, (256, 192))
        ctl = os.path.join(mnt, ".fidelity")
        sizes = {rel: os.stat(os.path.join(mnt, rel)).st_size for rel in rels}
        assert max(sizes.values()) <= 128 << 10  # one readahead window each
        reads = json.loads(read(os.path.join(ctl, "stats")))["reads_by_kind"]["jpeg"]
        start = threading.Barrier(32)

        def reader(i):
            start.wait()
            return {rel: read(os.path.join(mnt, rel)) for rel in rels[i::32]}

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            got = {}
            for part in pool.map(reader, range(32)):
                got.update(part)
        assert got == {rel: st.read(rel) for rel in rels}
        assert json.loads(read(os.path.join(ctl, "stats")))["reads_by_kind"]["jpeg"] - reads == len(rels)


def test_xattr_precedence_and_removal(imagenet_store, tmp_path, mnt):
    st = Store(imagenet_store)
    classes = sorted({r.split("/")[0] for r in st.files})
    cls = classes[0]
    in_cls = [r for r in sorted(st.files) if r.startswith(cls + "/") and st.files[r]["kind"] == "jpeg"]
    other = [r for r in sorted(st.files) if r.startswith(classes[1] + "/") and st.files[r]["kind"] == "jpeg"][0]
    f0, f1 = in_cls[0], in_cls[1]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"rules:\n  - {{path: \"{cls}/*\", scan_group: 2}}\n")

    def check(rel, level):
        p = os.path.join(mnt, rel)
        assert os.stat(p).st_size == len(st.read(rel, level)), (rel, level)
        assert read(p) == st.read(rel, level), (rel, level)
        assert os.getxattr(p, XA) == str(level).encode()

    with mounted(imagenet_store, mnt, "-o", "scan_group=6", "--config", str(cfg)):
        L = st.levels
        check(f0, 2)  # rule
        check(other, 6)  # mount option
        os.setxattr(os.path.join(mnt, cls), XA, b"4")  # dir beats rule
        check(f0, 4)
        check(f1, 4)
        check(other, 6)
        os.setxattr(mnt, XA, b"1")  # root: nearest ancestor wins
        check(f0, 4)
        check(other, 1)
        os.setxattr(os.path.join(mnt, f0), XA, b"3")
        check(f0, 3)
        os.setxattr(os.path.join(mnt, f0), XA, b"FULL")  # file beats dir; keywords in any case
        check(f0, L)
        check(f1, 4)
        assert os.getxattr(os.path.join(mnt, cls), XA) == b"4"
        # Bad values: EINVAL and nothing changes.
        for bad in (b"0", str(L + 1).encode(), b"abc", b"", b"-1", b"5 5"):
            with pytest.raises(OSError) as e:
                os.setxattr(os.path.join(mnt, f0), XA, bad)
            assert e.value.errno == errno.EINVAL, bad
            with pytest.raises(OSError) as e:
                os.setxattr(os.path.join(mnt, cls), XA, bad)
            assert e.value.errno == errno.EINVAL
        check(f0, L)
        # Removal falls back level by level.
        os.removexattr(os.path.join(mnt, f0), XA)
        check(f0, 4)
        os.removexattr(os.path.join(mnt, cls), XA)
        check(f0, 1)
        os.removexattr(mnt, XA)
        check(f0, 2)
        check(other, 6)
        with pytest.raises(OSError) as e:
            os.removexattr(os.path.join(mnt, f0), XA)
        assert e.value.errno == errno.ENODATA
        # Read-only attributes.
        p = os.path.join(mnt, f0)
        names = os.listxattr(p)
        for n in ("kind", "levels", "bytes", "record", "position", "source_size"):
            assert f"user.fidelity.{n}" in names
            with pytest.raises(OSError) as e:
                os.setxattr(p, f"user.fidelity.{n}", b"1")
            assert e.value.errno == errno.EPERM
        sizes = [int(x) for x in os.getxattr(p, "user.fidelity.bytes").split(b",")]
        assert sizes == [len(st.read(f0, k)) for k in range(1, L + 1)]
        assert int(os.getxattr(p, "user.fidelity.levels")) == L
        assert int(os.getxattr(p, "user.fidelity.source_size")) == st.files[f0]["source_size"]
        assert int(os.getxattr(p, "user.fidelity.record")) == st.files[f0]["record"]
        # The views have a fixed level.
        with pytest.raises(OSError) as e:
            os.setxattr(os.path.join(mnt, ".fidelity", "sg", "3", f0), XA, b"5")
        assert e.value.errno == errno.EPERM
        assert os.getxattr(os.path.join(mnt, ".fidelity", "sg", "3", f0), XA) == b"3"
        stats = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        assert stats["level_changes"] >= 6 and stats["eio_errors"] == 0


def test_writes_are_erofs(edge_store, mnt):
    st = Store(edge_store)
    rel = next(r for r in sorted(st.files) if st.files[r]["kind"] == "jpeg")
    with mounted(edge_store, mnt):
        p = os.path.join(mnt, rel)
        d = os.path.dirname(p)
        before = read(p)
        def write_through(mode):
            # Files are never opened on the daemon's side (no-open): a write-mode open of an
            # existing file succeeds in the kernel, and its first write gets EROFS.
            with open(p, mode, buffering=0) as f:
                f.write(b"x")

        attempts = [
            lambda: write_through("r+b"),
            lambda: open(p, "wb"),
            lambda: write_through("ab"),
            lambda: open(os.path.join(d, "new.jpg"), "wb"),
            lambda: os.mkdir(os.path.join(d, "newdir")),
            lambda: os.unlink(p),
            lambda: os.rmdir(d),
            lambda: os.rename(p, p + ".x"),
            lambda: os.link(p, p + ".x"),
            lambda: os.symlink("x", os.path.join(d, "lnk")),
            lambda: os.chmod(p, 0o777),
            lambda: os.utime(p, (1, 1)),
            lambda: os.truncate(p, 0),
            lambda: os.mknod(os.path.join(d, "fifo"), 0o600 | 0o010000),
            lambda: os.setxattr(p, "user.other", b"1"),
        ]
        for i, act in enumerate(attempts):
            with pytest.raises(OSError) as e:
                act()
            assert e.value.errno == errno.EROFS, (i, e.value)
        assert not os.access(p, os.W_OK)
        assert read(p) == before


def test_control_folder(imagenet_store, mnt):
    st = Store(imagenet_store)
    with mounted(imagenet_store, mnt):
        ctl = os.path.join(mnt, ".fidelity")
        assert ".fidelity" not in os.listdir(mnt)
        assert os.path.isdir(ctl)
        assert sorted(os.listdir(ctl)) == ["config", "metrics", "order", "sg", "stats"]
        assert sorted(os.listdir(os.path.join(ctl, "sg")), key=int) == [str(k) for k in range(1, st.levels + 1)]
        assert not os.path.exists(os.path.join(ctl, "sg", "0"))
        assert not os.path.exists(os.path.join(ctl, "sg", str(st.levels + 1)))
        assert not os.path.exists(os.path.join(ctl, "nothing"))
        for k in (1, st.levels):
            view = os.path.join(ctl, "sg", str(k))
            assert sorted(os.listdir(view)) == sorted(os.listdir(mnt))
            assert sorted(walk_files(view)) == sorted(walk_files(mnt))
        rel = sorted(st.files)[0]
        read(os.path.join(mnt, rel))
        stats = json.loads(read(os.path.join(ctl, "stats")))
        for key in ("reads", "bytes_served", "reads_by_kind", "eio_errors", "level_changes", "files", "levels"):
            assert key in stats
        assert stats["files"] == len(st.files) and stats["bytes_served"] > 0
        conf = json.loads(read(os.path.join(ctl, "config")))
        assert conf["scan_group"] == "full" and conf["levels"] == st.levels
        sv = os.statvfs(mnt)
        assert sv.f_files >= len(st.files) and sv.f_blocks > 0


def test_concurrent_reads_and_level_flips(imagenet_store, mnt):
    """Readers never see a mix: every read is one level's complete file, whatever flips happen."""
    st = Store(imagenet_store)
    rels = [r for r in sorted(st.files) if st.files[r]["kind"] == "jpeg"][:24]
    expect = {r: {st.read(r, k): k for k in range(1, st.levels + 1)} for r in rels}
    dirs = sorted({os.path.dirname(r) for r in rels})
    stop = threading.Event()
    errors = []
    reads = [0]
    with mounted(imagenet_store, mnt, "-o", "scan_group=5"):
        def reader(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                rel = rng.choice(rels)
                try:  # half of them in small reads through the page cache
                    data = read(os.path.join(mnt, rel), 4096 if rng.random() < 0.5 else 0)
                except OSError as e:
                    errors.append(f"{rel}: {e}")
                    continue
                if data not in expect[rel]:
                    errors.append(f"{rel}: {len(data)} bytes match no level")
                reads[0] += 1

        def flipper(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                try:
                    flip_level(mnt, rng, rels, dirs, st.levels)
                except OSError as e:
                    errors.append(f"flip: {e}")

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(6)]
        threads += [threading.Thread(target=flipper, args=(100 + i,)) for i in range(2)]
        for t in threads:
            t.start()
        stop.wait(STRESS_SECONDS)  # the stress phase runs for a bounded time, then stops itself
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors[:5]
        assert reads[0] > 100
        # Quiet again (once the entries that a folder change drops just after its reply are
        # gone): stat and read agree, and the sizes match the effective level.
        assert wait_invalidations(mnt)
        for rel in rels:
            p = os.path.join(mnt, rel)
            level = int(os.getxattr(p, XA))
            data = read(p)
            assert data == st.read(rel, level)
            assert os.stat(p).st_size == len(data)


def test_flipped_byte_fails_one_file_only(imagenet_store, tmp_path, mnt):
    """A flipped byte in level 3 of one JPEG: that file (and its views from level 3 up) is EIO,
    its levels 1-2 and every other file (those of its record too) read correctly; stats count
    the EIOs and the log names the file once."""
    store = str(tmp_path / "s")
    shutil.copytree(imagenet_store, store)
    st = Store(store)
    jpegs = [r for r in sorted(st.files) if st.files[r]["kind"] == "jpeg"]
    victim = jpegs[len(jpegs) // 2]
    vrec = st.files[victim]["record"]
    neighbours = [r for r in st.files if st.files[r]["record"] == vrec and r != victim]
    assert neighbours, "the victim's record holds other files"
    off, size, _ = st.files[victim]["pieces"][3]
    with open(os.path.join(store, st.records[vrec][0]), "r+b") as f:
        f.seek(off + size // 2)
        b = f.read(1)
        f.seek(off + size // 2)
        f.write(bytes([b[0] ^ 0x55]))
    log = tmp_path / "daemon.log"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"log:\n  level: info\n  file: {log}\n")

    def expect_eio(p):
        with pytest.raises(OSError) as e:
            read(p)
        assert e.value.errno == errno.EIO, p

    eio_reads = 0
    with mounted(store, mnt, "--config", str(cfg)):
        for rel in sorted(st.files):
            if rel == victim:
                continue
            assert read(os.path.join(mnt, rel)) == st.read(rel), rel
        for rel in neighbours:
            assert read(os.path.join(mnt, ".fidelity", "sg", "2", rel)) == st.read(rel, 2), rel
        for k in range(1, st.levels + 1):
            p = os.path.join(mnt, ".fidelity", "sg", str(k), victim)
            if k < 3:
                assert read(p) == st.read(victim, k), k  # pieces 0..k < 3 are intact
            else:
                expect_eio(p)
                eio_reads += 1
        for _ in range(3):  # the live tree (full level), again and again
            expect_eio(os.path.join(mnt, victim))
            eio_reads += 1
        stats = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        assert stats["eio_errors"] >= eio_reads and stats["eio_files"] == 1, stats
        for rel in neighbours:  # still fine after the failures
            assert read(os.path.join(mnt, rel)) == st.read(rel), rel
    lines = [l for l in log.read_text().splitlines() if "EIO" in l]
    assert len(lines) == 1 and victim in lines[0] and "piece 3" in lines[0], lines


def test_nested_folder_flips_never_deadlock(imagenet_store, mnt):
    """The root, a class folder and its files changed at once by several threads while others read:
    each folder change holds its folder's lock in the kernel until answered, and used to wait for
    the other's lock to invalidate entries (a deadlock within a second). Every flip must return and
    every read must be one level's file."""
    st = Store(imagenet_store)
    cls = sorted({r.split("/")[0] for r in st.files})[0]
    rels = [r for r in sorted(st.files) if r.startswith(cls + "/") and st.files[r]["kind"] == "jpeg"][:20]
    expect = {r: set(st.all_levels(r)) for r in rels}
    errors, flips, reads = [], [0], [0]
    with mounted(imagenet_store, mnt):
        deadline = time.monotonic() + 2  # bounded: the old code hung within the first flips

        def flipper(target):
            rng = random.Random(target)
            while time.monotonic() < deadline:
                try:
                    os.setxattr(os.path.join(mnt, target), XA, str(rng.randint(1, st.levels)).encode())
                    flips[0] += 1
                except OSError as e:
                    errors.append(f"flip {target}: {e}")

        def reader(seed):
            rng = random.Random(seed)
            while time.monotonic() < deadline:
                rel = rng.choice(rels)
                try:
                    if read(os.path.join(mnt, rel)) not in expect[rel]:
                        errors.append(f"{rel}: matches no level")
                    reads[0] += 1
                except OSError as e:
                    errors.append(f"{rel}: {e}")

        threads = [threading.Thread(target=flipper, args=(t,), daemon=True) for t in ("", cls, "", cls, rels[0])]
        threads += [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, deadline + 20 - time.monotonic()))  # hard limit: hung means deadlock
        hung = [t.name for t in threads if t.is_alive()]
        assert not hung, f"deadlocked: {hung} after {flips[0]} flips"
        assert not errors, errors[:5]
        assert flips[0] > 100 and reads[0] > 10


def test_level_changes_against_rm_mv_rmdir_never_deadlock(imagenet_store, mnt):
    """rm, mv and rmdir lock the parent folder and then the node, which the kernel holds while a
    level change of that node is answered; the change's invalidation of the node's own name needs
    the parent's lock (tests/unit FilesystemTest.AChangeAnswersWhileItsOwnNameWaitsForItsParentsLock
    makes that interleaving certain). Here: both in loops, bounded, and every call must return,
    the changes ok, the removals EROFS."""
    st = Store(imagenet_store)
    cls = sorted({r.split("/")[0] for r in st.files})[0]
    rel = sorted(r for r in st.files if r.startswith(cls + "/") and st.files[r]["kind"] == "jpeg")[0]
    errors, changes, refusals = [], [0], [0]
    with mounted(imagenet_store, mnt):
        folder, f = os.path.join(mnt, cls), os.path.join(mnt, rel)
        deadline = time.monotonic() + 3

        def changer(path):
            while time.monotonic() < deadline:
                try:
                    os.setxattr(path, XA, b"2")
                    os.removexattr(path, XA)
                    changes[0] += 2
                except OSError as e:
                    errors.append(f"change {path}: {e}")

        def remover():
            attempts = [lambda: os.unlink(f), lambda: os.rename(f, f + ".moved"), lambda: os.rmdir(folder),
                        lambda: os.rename(folder, folder + ".moved")]
            while time.monotonic() < deadline:
                for act in attempts:
                    try:
                        act()
                        errors.append("a removal succeeded")
                    except OSError as e:
                        if e.errno != errno.EROFS:
                            errors.append(f"removal: {e}")
                    refusals[0] += 1

        threads = [threading.Thread(target=changer, args=(p,), daemon=True) for p in (f, folder)]
        threads += [threading.Thread(target=remover, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, deadline + 20 - time.monotonic()))  # hard limit: hung means deadlock
        hung = [t.name for t in threads if t.is_alive()]
        assert not hung, f"deadlocked after {changes[0]} changes, {refusals[0]} refusals"
        assert not errors, errors[:5]
        assert changes[0] > 10 and refusals[0] > 10  # a change behind a removal answers in 0.2 s
        assert read(f) in set(st.all_levels(rel)) and cls in os.listdir(mnt)  # the mount still answers


def test_usage_and_runtime_errors(edge_store, tmp_path, mnt):
    def run(*args):
        return subprocess.run([fid_bin(), "mount", *map(str, args)], capture_output=True, text=True)

    p = run(edge_store, mnt, "-o", "scan_group=3,frobnicate")
    assert p.returncode == 2 and "frobnicate" in p.stderr
    # gpu=on without a device: tests/integration/test_gpu.py (it depends on the machine)
    p = run(edge_store, mnt, "-o", "scan_group=99")
    assert p.returncode == 2 and "scan_group" in p.stderr
    p = run(edge_store, mnt, "-o", "scan_group=11")  # the store has 10 levels
    assert p.returncode == 2 and "scan_group" in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("threads: 4\nscan_grop: 3\n")
    p = run(edge_store, mnt, "--config", bad)
    assert p.returncode == 2 and f"{bad}:2" in p.stderr and "scan_grop" in p.stderr
    bad.write_text("encoding: sequential\nthreads: 4\nencoding: progressive\n")  # YAML forbids it
    p = run(edge_store, mnt, "--config", bad)
    assert p.returncode == 2 and f"{bad}:3: key 'encoding': given twice (first on line 1)" in p.stderr, p.stderr
    p = run(edge_store, mnt, "-o", f"config={tmp_path / 'missing.yaml'}")
    assert p.returncode == 2 and "missing.yaml" in p.stderr
    p = run(tmp_path / "nostore", mnt)
    assert p.returncode in (1, 2) and "nostore" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(empty, mnt)
    assert p.returncode == 1 and "empty" in p.stderr
    p = run(edge_store, tmp_path / "nomnt")
    assert p.returncode == 2 and "nomnt" in p.stderr
    # The parser's errors name the command; a -o list split by a space says so.
    p = run(edge_store)
    assert p.returncode == 2 and p.stderr.startswith("fidelityfs mount: MOUNTPOINT is required\n"), p.stderr
    p = run(edge_store, mnt, "-o", "scan_group=5,", "threads=2")
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines()[:2] == [
        "fidelityfs mount: unexpected argument 'threads=2'",
        "fidelityfs mount: a -o list is one argument: no spaces after its commas (-o a=1,b=2)"], p.stderr
    assert not is_mounted(mnt)
    for opt in ("gpu=auto", "gpu=off", "threads=2,cache=64MiB"):
        with mounted(edge_store, mnt, "-o", opt):
            assert os.listdir(mnt)


def test_sigterm_unmounts_cleanly(edge_store, mnt):
    mount(edge_store, mnt)
    try:
        pid = daemon_pid(mnt)
        assert pid and is_mounted(mnt)
        os.kill(pid, signal.SIGTERM)
        assert wait_exit(pid, 5)  # the daemon unmounts and exits
        assert not is_mounted(mnt)
        assert os.listdir(mnt) == []
    finally:
        unmount(mnt)


def test_sigterm_during_level_changes_and_lookups_ends_the_daemon(imagenet_store, mnt):
    """SIGTERM while folders' levels flip (their entries invalidated in the background, which
    takes folder locks that lookups hold until answered) and readers look names up: the daemon
    stops invalidating while it still answers requests, then ends its loop and unmounts, within
    seconds (it used to join an invalidation that waited for a lookup nobody would answer)."""
    st = Store(imagenet_store)
    rels = sorted(r for r in st.files if st.files[r]["kind"] == "jpeg")
    dirs = [""] + st.all_dirs()
    for attempt in range(3):
        mount(imagenet_store, mnt)
        done, busy = threading.Event(), threading.Event()
        flips = [0]

        def flipper(seed):
            rng = random.Random(seed)
            while not done.is_set():
                try:
                    flip_level(mnt, rng, rels, dirs, st.levels)
                    flips[0] += 1
                    if flips[0] >= 50:
                        busy.set()
                except OSError:
                    pass  # the mount is going away

        def looker(seed):
            rng = random.Random(seed)
            while not done.is_set():
                try:
                    os.stat(os.path.join(mnt, rng.choice(rels)))
                except OSError:
                    pass

        threads = [threading.Thread(target=flipper, args=(attempt * 10 + i,), daemon=True) for i in range(2)]
        threads += [threading.Thread(target=looker, args=(attempt * 10 + 5 + i,), daemon=True) for i in range(3)]
        try:
            pid = daemon_pid(mnt)
            for t in threads:
                t.start()
            assert busy.wait(60), f"only {flips[0]} flips"
            os.kill(pid, signal.SIGTERM)
            assert wait_exit(pid, 15), f"the daemon did not end after SIGTERM (attempt {attempt})"
            assert not is_mounted(mnt)
        finally:
            done.set()
            for t in threads:
                t.join(30)
            unmount(mnt)


def test_stale_mount_is_recovered(edge_store, mnt):
    mount(edge_store, mnt)
    pid = daemon_pid(mnt)
    os.kill(pid, signal.SIGKILL)
    assert wait_exit(pid, 5)
    with pytest.raises(OSError) as e:
        os.statvfs(mnt)  # stat may still be answered from cached attributes
    # Over io_uring the end of the dead daemon's rings aborts the connection: ECONNABORTED.
    over_uring = os.environ.get("FIDELITYFS_TEST_TRANSPORT") == "uring"
    assert e.value.errno == (errno.ECONNABORTED if over_uring else errno.ENOTCONN)
    p = mount(edge_store, mnt)
    try:
        assert "stale" in p.stderr
        assert os.listdir(mnt)
        os.statvfs(mnt)
    finally:
        unmount(mnt)


def test_foreground_mode_and_helper(edge_store, mnt, tmp_path):
    # -f stays in the foreground until unmounted; the mount.fidelityfs helper takes fstab options.
    helper = os.path.join(REPO, "scripts", "mount.fidelityfs")
    env = dict(os.environ, FIDELITYFS_BIN=fid_bin())
    p = subprocess.run([helper, edge_store, mnt, "-o", "rw,noauto,nofail,_netdev,defaults,scan_group=2"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    try:
        st = Store(edge_store)
        rel = next(r for r in sorted(st.files) if st.files[r]["kind"] == "jpeg")
        assert read(os.path.join(mnt, rel)) == st.read(rel, 2)
        with open("/proc/self/mounts") as f:
            assert any(line.split()[1] == os.path.realpath(mnt) and line.split()[2] == "fuse.fidelityfs" for line in f)
    finally:
        unmount(mnt)
    p = subprocess.run([helper, edge_store, mnt, "-o", "bogus_option"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "bogus_option" in p.stderr


@needs_djpeg
def test_big_imagenet_every_file_every_level(tmp_path_factory, mnt):
    """A 500-image ImageNet-like set (real photos when ../shared has them): every JPEG decodes with
    PIL at levels 1, 5 and full, full is pixel-identical to the source; djpeg on a sample."""
    big = make_tree(str(tmp_path_factory.mktemp("src") / "big"), "imagenet", count=500, classes=10)
    store = str(tmp_path_factory.mktemp("big") / "store")
    subprocess.run([fid_bin(), "pack", big, store, "--progress", "off"], check=True, capture_output=True)
    st = Store(store)
    rels = sorted(st.files)

    def check(level, i, rel):
        base = os.path.join(mnt, ".fidelity", "sg", str(level))
        data = read(os.path.join(base, rel))
        assert len(data) == os.stat(os.path.join(base, rel)).st_size
        im = decode_pil(data)
        if level == st.levels:
            src = Image.open(os.path.join(big, rel))
            src.load()
            assert im.tobytes() == src.tobytes(), rel
        if i % 20 == 0:
            ok, why = djpeg_clean(data)
            assert ok, (rel, level, why)

    # PIL decodes without the GIL: one file a core.
    with mounted(store, mnt), concurrent.futures.ThreadPoolExecutor(2) as pool:
        for level in (1, 5, st.levels):
            for done in [pool.submit(check, level, i, rel) for i, rel in enumerate(rels)]:
                done.result()  # raises the check's AssertionError


def test_file_level_change_right_after_its_folders(imagenet_store, mnt):
    """A file's level set right after its folder's (whose change may still be finishing in the
    daemon) is what the very next stat sees: the file's name is invalidated before the setxattr
    returns, not later by the background thread."""
    with mounted(imagenet_store, mnt, "-o", "scan_group=7"):
        folder = os.path.join(mnt, sorted(os.listdir(mnt))[1])
        f = os.path.join(folder, sorted(os.listdir(folder))[0])
        sizes = [int(x) for x in os.getxattr(f, "user.fidelity.bytes").split(b",")]
        assert len(set(sizes)) > 5
        stale = 0
        for _ in range(200):
            os.setxattr(folder, XA, b"3")
            assert os.stat(f).st_size == sizes[2]
            os.setxattr(f, XA, b"full")
            stale += os.stat(f).st_size != sizes[9]
            os.removexattr(f, XA)
            os.removexattr(folder, XA)
        assert stale == 0


def test_a_second_mount_on_a_fidelityfs_mount_is_refused(edge_store, imagenet_store, mnt):
    """Mounting over a fidelityfs mount would hide it (and take two unmounts): refused, naming the
    store mounted there and its daemon; the first mount goes on serving, mounted once."""
    st = Store(edge_store)
    rel = sorted(r for r, f in st.files.items() if f["kind"] == "blob")[0]
    with mounted(edge_store, mnt):
        pid = daemon_pid(mnt)
        p = mount(imagenet_store, mnt, check=False)
        assert p.returncode == 2, p.stderr
        real = os.path.realpath(mnt)
        with open("/proc/self/mountinfo") as f:
            here = [line.split() for line in f if line.split()[4] == real]
        assert len(here) == 1
        source = here[0][here[0].index("-") + 2]  # fidelityfs:STORE
        assert source.startswith("fidelityfs:") and os.path.basename(edge_store) in source
        assert f"{real}: already a fidelityfs mount of {source} (daemon pid {pid})" in p.stderr, p.stderr
        assert f"fusermount3 -u {real}" in p.stderr, p.stderr
        # Through a symbolic link to the mount point (or a folder inside it), -o nonempty too: the
        # same mount by identity, refused the same way.
        link = os.path.join(os.path.dirname(real), "link-to-mnt")
        os.symlink(real, link)
        try:
            folder = next(e for e in sorted(os.listdir(real)) if os.path.isdir(os.path.join(real, e)))
            for target in (link, os.path.join(link, folder)):
                p = mount(imagenet_store, target, "-o", "nonempty", check=False)
                assert p.returncode == 2, p.stderr
                want = "already a fidelityfs mount" if target == link else f"resolves into the fidelityfs mount at {real},"
                assert f"{target}: {want} of {source} (daemon pid {pid})" in p.stderr, p.stderr
        finally:
            os.remove(link)
        with open("/proc/self/mountinfo") as f:
            assert sum(line.split()[4] == real for line in f) == 1, "mounted once"
        assert read(os.path.join(mnt, rel)) == st.read(rel)


def test_a_log_file_that_cannot_be_opened_is_a_usage_error_in_both_modes(edge_store, tmp_path):
    """log.file in a folder that does not exist: exit 2 naming the file, in the foreground (-f)
    and in the background (the daemon finds it), and nothing stays mounted."""
    log = tmp_path / "no-such-folder" / "d.log"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"log:\n  file: {log}\n")
    mnt = tmp_path / "m"
    for extra in ([], ["-f"]):
        p = mount(edge_store, str(mnt), "--config", str(cfg), *extra, check=False)
        assert p.returncode == 2 and str(log) in p.stderr, (extra, p.returncode, p.stderr)
        assert not os.path.ismount(mnt)


def test_a_refused_mount_gives_fusermount3s_own_reason(edge_store):
    """A user for whom the kernel mount fails (no access to /dev/fuse, or allow_other that
    /etc/fuse.conf does not allow): exit 1, and the error line carries what libfuse or
    fusermount3 said, not a guess."""
    work = tempfile.mkdtemp(prefix="fid-user-", dir="/tmp")  # outside root's private pytest folders
    try:
        os.chmod(work, 0o777)
        store = os.path.join(work, "store")
        shutil.copytree(edge_store, store)
        for d, dirs, files in os.walk(store):
            for n in dirs + files:
                os.chmod(os.path.join(d, n), 0o755 if n in dirs else 0o644)
        mnt = os.path.join(work, "m")
        os.mkdir(mnt)
        os.chmod(mnt, 0o777)
        binary = shutil.copy(fid_bin(), os.path.join(work, "fidelityfs"))  # the checkout may be closed to others
        os.chmod(binary, 0o755)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={work}",
                            f"XDG_CACHE_HOME={work}/cache", binary, "mount", store, mnt, "-o", "allow_other"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert re.search(rf"^fidelityfs mount: cannot mount at {re.escape(mnt)}: (fuse|fusermount3): \S", p.stderr, re.M), p.stderr
        assert not os.path.ismount(mnt)
    finally:
        subprocess.run(["fusermount3", "-uz", os.path.join(work, "m")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def test_a_mount_over_a_hung_mount_answers(edge_store, imagenet_store, mnt):
    """The daemon of the mount there is stopped (SIGSTOP), so a stat of the mount point would wait
    forever: mount says so within seconds (exit 1) instead of hanging."""
    with mounted(edge_store, mnt):
        pid = daemon_pid(mnt)
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            p = mount(imagenet_store, mnt, check=False)
            took = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        assert p.returncode == 1 and f"{os.path.realpath(mnt)}: the mount there does not answer" in p.stderr, p.stderr
        assert took < 15, took


def test_mount_point_must_be_empty_and_generic_options_are_taken(edge_store, tmp_path):
    """A folder that holds files is refused (a mount would hide them) unless -o nonempty;
    mount(8)'s generic options such as ro and noatime are taken."""
    target = tmp_path / "full"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    p = run("mount", edge_store, str(target), check=False)
    assert p.returncode == 2, p.stderr
    assert "mount point is not empty (it holds 'keep.txt'), and a mount would hide its files" in p.stderr
    assert "add -o nonempty" in p.stderr
    with mounted(edge_store, str(target), "-o", "nonempty,ro,noatime,defaults"):
        assert not os.path.exists(target / "keep.txt")
        assert os.listdir(target)
    assert (target / "keep.txt").read_text() == "mine"


def test_without_syslog_the_daemon_logs_to_a_file_it_names(edge_store, tmp_path, mnt):
    """Where nothing listens on /dev/log (containers, CI), the daemon's lines go to fidelityfs.log
    in the cache folder, and mount says so."""
    if os.path.exists("/dev/log"):
        pytest.skip("this machine has syslog")
    cache = tmp_path / "cache"
    log = cache / "fidelityfs" / "fidelityfs.log"
    p = mount(edge_store, mnt, "-o", "scan_group=2", env=dict(os.environ, XDG_CACHE_HOME=str(cache)))
    try:
        assert p.stderr == (f"fidelityfs mount: no syslog on this machine (/dev/log): the daemon logs to {log} "
                            "(log.file in a config chooses)\n"), p.stderr
        with pytest.raises(OSError):
            os.setxattr(mnt, XA, b"eleven")
    finally:
        unmount(mnt)
    text = log.read_text()
    assert "fidelityfs[" in text and "setxattr inode 1 user.fidelity.scan_group='eleven'" in text, text
    assert log.stat().st_mode & 0o777 == 0o600  # private, like every file of the cache folder


def test_more_records_than_the_soft_open_files_limit(imagenet_tree, tmp_path, mnt):
    """A local store holds a descriptor open per record: started under a soft limit of 48 open
    files (a hard one of 4096), a mount of a store with more records than that reads every file
    right (fidelityfs takes the hard limit)."""
    store = pack(imagenet_tree, str(tmp_path / "many-records"), "--record-bytes", "64KiB")
    st = Store(store)
    assert len({f["record"] for f in st.files.values()}) > 48
    rels = sorted(st.files)
    argv = ["prlimit", "--nofile=48:4096", fid_bin(), "mount", store, mnt]
    with mounted(store, mnt, argv=argv):
        got = {r: read(os.path.join(mnt, r)) for r in rels}
    assert [r for r in rels if got[r] != st.read(r)] == []


def test_the_transport_setting_and_the_transport_the_mount_says_it_uses(edge_store, mnt):
    """transport=dev and auto keep /dev/fuse; transport=uring takes FUSE over io_uring where the fuse
    module's enable_uring is on (the same bytes), and where it is off (or the kernel lacks it) is
    an error naming the parameter, with nothing mounted. stats and /.fidelity/config say which."""
    def said(path):
        with open(os.path.join(mnt, ".fidelity", path)) as f:
            return json.load(f)
    st = Store(edge_store)
    rel = next(r for r in sorted(st.files) if st.files[r]["kind"] == "jpeg")
    with mounted(edge_store, mnt, "-o", "transport=dev"):
        assert said("stats")["transport"] == "dev"
        assert said("config")["transport"] == "dev" and said("config")["transport_in_use"] == "dev"
    param = "/sys/module/fuse/parameters/enable_uring"
    on = os.path.exists(param) and open(param).read().strip() == "Y"
    if on:
        # auto is /dev/fuse even where the kernel offers io_uring: over it a Python reader's
        # kernel time doubles (docs/MOUNT.md).
        with mounted(edge_store, mnt, "-o", "transport=auto"):
            assert said("stats")["transport"] == "dev"
        with mounted(edge_store, mnt, "-o", "transport=uring"):
            assert said("stats")["transport"].startswith("uring (")
            assert said("config")["transport_in_use"] == said("stats")["transport"]
            assert read(os.path.join(mnt, rel)) == st.read(rel, st.levels)
    else:
        p = mount(edge_store, mnt, "-o", "transport=uring", check=False)
        assert p.returncode == 1, p.stderr
        assert "transport=uring" in p.stderr and ("enable_uring" in p.stderr or "CONFIG_FUSE_IO_URING" in p.stderr), p.stderr
        assert not is_mounted(mnt)
