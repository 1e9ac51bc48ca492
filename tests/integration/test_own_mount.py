"""The daemon reaches its own mount only, briefly (fs/own_mount.h): a clip loader that builds its
frame paths reads right bytes while the mount is moved (mount --move), covered by another mount,
or lazily unmounted, and the daemon opens nothing by a path beneath the mount point (strace); a
SIGTERM unmounts a moved mount where it is and never what its old path names; and a plain
unmount right after the last reader exits succeeds, after a loader in a 10,000-frame clip and
after one that looks up a few files in each of 1,000 folders."""
import contextlib
import os
import random
import re
import signal
import subprocess
import threading

import pytest
from PIL import Image

from conftest import fid_bin
from fidstore import Store
from mountutil import daemon_pid, is_mounted, mount, mounted, unmount, wait_exit

LONG, FOLDERS, CLIPS, FRAMES = 10_000, 1_000, 6, 64


@pytest.fixture(scope="module")
def own_store(tmp_path_factory):
    """A 10,000-frame clip, 6 clips of 64 frames and 1,000 folders of 3 images, all tiny."""
    src = tmp_path_factory.mktemp("own") / "src"
    rng = random.Random(3)

    def save(path, seed):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (24, 16), (seed % 251, seed * 7 % 253, seed * 13 % 241)).save(path, quality=80)
    for i in range(1, LONG + 1):
        save(src / "long" / "video" / f"img_{i:05d}.jpg", i)
    for c in range(CLIPS):
        for i in range(1, FRAMES + 1):
            save(src / "clips" / f"video_{c}" / f"img_{i:05d}.jpg", rng.randrange(1 << 20))
    for d in range(FOLDERS):
        for i in range(3):
            save(src / "many" / f"d{d:04d}" / f"{i}.jpg", d * 3 + i)
    store = str(tmp_path_factory.mktemp("own") / "store")
    subprocess.run([fid_bin(), "pack", str(src), store, "--progress", "off", "--jobs", "2"], capture_output=True,
                   text=True, check=True)
    return store


def expected_frames(store):
    st = Store(store)
    return {r: st.read(r, st.levels) for r in st.files if r.startswith("clips/")}


def read_clips_at(root_fd, expected, wrong, between=None):
    """A loader that builds frame paths, relative to a descriptor of the mount's root (as a process
    whose working folder is in the mount): every clip, frame by frame; wrong bytes are counted."""
    for c in range(CLIPS):
        if between:
            between(c)
        for i in range(1, FRAMES + 1):
            rel = f"clips/video_{c}/img_{i:05d}.jpg"
            fd = os.open(rel, os.O_RDONLY, dir_fd=root_fd)
            try:
                data = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
            finally:
                os.close(fd)
            if data != expected[rel]:
                wrong.append(rel)


@contextlib.contextmanager
def traced(pid, log):
    """strace of the daemon's opens and stats (every thread), from once it has attached to every
    thread (it says so on stderr) until the block ends."""
    p = subprocess.Popen(["strace", "-f", "-p", str(pid), "-o", str(log), "-e",
                          "trace=open,openat,openat2,statx,newfstatat,open_tree"], stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()  # "strace: Process N attached with T threads"
        assert "attached" in line, line
        yield
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=10)


def absolute_paths(log):
    """The absolute paths in the traced calls."""
    return re.findall(r'"(/[^"]*)"', log.read_text())


@contextlib.contextmanager
def daemon_of(store, mnt, *paths):
    """The store mounted at mnt; yields its daemon's pid. Afterwards every mount left at mnt or
    `paths` is detached and the daemon ended."""
    mount(store, mnt)
    pid = daemon_pid(mnt)
    try:
        yield pid
    finally:
        for m in (mnt, *paths):
            while is_mounted(m):
                subprocess.run(["umount", "-l", m], capture_output=True)
        if not wait_exit(pid, 5):
            os.kill(pid, signal.SIGKILL)


def read_clips_traced(mnt, pid, tmp_path, store, between):
    """The loader reads every clip from a descriptor of mnt's root under strace, `between` run
    before each clip; returns the frames read wrong, the traced absolute paths and the stats."""
    expected, wrong = expected_frames(store), []
    root = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with traced(pid, tmp_path / "strace.log"):
            read_clips_at(root, expected, wrong, between)
            stats = os.open(".fidelity/stats", os.O_RDONLY, dir_fd=root)
            text = os.read(stats, 1 << 20).decode()
            os.close(stats)
    finally:
        os.close(root)
    return wrong, absolute_paths(tmp_path / "strace.log"), text


def test_a_moved_mount_is_reached_where_it_is_and_unmounted_there(own_store, tmp_path):
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    os.makedirs(new)
    with daemon_of(own_store, old, new) as pid:
        def move(c):
            if c == 2:
                subprocess.run(["mount", "--move", old, new], check=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "other", old], check=True)
        wrong, paths, _ = read_clips_traced(old, pid, tmp_path, own_store, move)
        assert wrong == []
        assert [p for p in paths if p.startswith(old + "/") or p.startswith(new + "/")] == []
        assert new in paths  # listings went on where the mount was moved to
        os.kill(pid, signal.SIGTERM)
        assert wait_exit(pid, 10)
        assert not is_mounted(new)  # unmounted where it is
        assert is_mounted(old)  # and what the old path names now is left alone


@pytest.mark.parametrize("how", ["covered", "lazily unmounted"])
def test_a_mount_covered_or_lazily_unmounted_is_no_longer_reached(own_store, tmp_path, how):
    mnt = str(tmp_path / "mnt")
    with daemon_of(own_store, mnt) as pid:
        def hide(c):
            if c == 2 and how == "covered":
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "other", mnt], check=True)
            elif c == 2:
                subprocess.run(["umount", "-l", mnt], check=True)
        wrong, paths, stats = read_clips_traced(mnt, pid, tmp_path, own_store, hide)
        assert wrong == []
        assert [p for p in paths if p.startswith(mnt + "/")] == []
        assert '"pushed_frames"' in stats
        if how == "covered":
            os.kill(pid, signal.SIGTERM)
            assert wait_exit(pid, 10)
            assert is_mounted(mnt)  # the covering mount stays
        else:
            assert wait_exit(pid, 10)  # the last descriptor closed: the mount is gone, and its daemon


def read_long_clip(mnt, start):
    """A loader that builds paths: 64 frames of the long clip from `start`."""
    for i in range(start, start + 64):
        with open(os.path.join(mnt, "long", "video", f"img_{i:05d}.jpg"), "rb") as f:
            f.read()


def stat_many_folders(mnt):
    """A look at a few files in each of the 1,000 folders."""
    for d in range(FOLDERS):
        for i in range(2):
            os.stat(os.path.join(mnt, "many", f"d{d:04d}", f"{i}.jpg"))


@pytest.mark.parametrize("reader", [read_long_clip, stat_many_folders], ids=["long clip", "1000 folders"])
def test_a_plain_unmount_right_after_the_last_reader_exits_succeeds(own_store, tmp_path, reader):
    mnt = str(tmp_path / "mnt")
    rng = random.Random(7)
    failures = []
    for _ in range(10):
        mount(own_store, mnt)
        pid = daemon_pid(mnt)
        try:
            t = threading.Thread(target=reader, args=(mnt, rng.randrange(1, LONG - 64)) if reader is read_long_clip
                                 else (mnt,))
            t.start()
            t.join()
            p = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
            if p.returncode != 0:
                failures.append(p.stderr.strip())
        finally:
            unmount(mnt)
            wait_exit(pid, 10)
    assert failures == []
