"""Shared fixtures for the integration tests: the binary, source trees, packed stores.

Source trees use real photographs from ../shared/datasets when that folder exists (this
workplace and its CI), and synthetic photo-like images from tests/fixtures otherwise."""
import csv
import os
import sqlite3
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "datasets")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))  # the fidelityfs package, uninstalled


def fid_bin():
    return os.environ.get("FIDELITYFS_BIN", os.path.join(REPO, "build", "cli", "fidelityfs"))


_FIGURES = []


def report(line):
    """A figure a test measured: printed (pytest -s), repeated in the run's summary, and appended to
    $FIDELITYFS_REPORT_DIR/figures.txt when that is set."""
    print(line)
    _FIGURES.append(line)
    folder = os.environ.get("FIDELITYFS_REPORT_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "figures.txt"), "a") as f:
            f.write(line + "\n")


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("fidelityfs figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


def run(*args, check=True, **kw):
    """Runs fidelityfs with args; returns the CompletedProcess (text mode)."""
    p = subprocess.run([fid_bin(), *map(str, args)], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"fidelityfs {' '.join(map(str, args))} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture(scope="session", autouse=True)
def _private_cache_home(tmp_path_factory):
    """Mounts keep their tables files and remote index copies under $XDG_CACHE_HOME/fidelityfs:
    a folder of this run's, not the user's."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


def _photos():
    """Folder of real photos, or None when ../shared is not there or the fetch fails."""
    script = os.path.join(SHARED, "fetch-photos.sh")
    if not os.path.exists(script) or os.environ.get("FIDELITYFS_SYNTHETIC_ONLY"):
        return None
    p = subprocess.run(["bash", script], capture_output=True, text=True)
    folder = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else ""
    return folder if os.path.isdir(folder) else None


def make_tree(out, kind, count=0, classes=0):
    photos = _photos()
    if photos:
        cmd = [sys.executable, os.path.join(SHARED, "make_imagefolder.py"), "--photos", photos, "--kind", kind,
               "--out", out, "--jobs", "2"]
    else:
        cmd = [sys.executable, os.path.join(REPO, "tests", "fixtures", "make_tree.py"), "--kind", kind, "--out", out]
    if count:
        cmd += ["--count", str(count), "--classes", str(classes)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def edge_tree(tmp_path_factory):
    return make_tree(str(tmp_path_factory.mktemp("src") / "edge"), "edge")


@pytest.fixture(scope="session")
def imagenet_tree(tmp_path_factory):
    return make_tree(str(tmp_path_factory.mktemp("src") / "imagenet"), "imagenet", count=300, classes=6)


def manifest(tree):
    with open(os.path.join(tree, "MANIFEST.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def index_rows(store, sql):
    """The rows a query of a store's index.sqlite gives (read-only)."""
    db = sqlite3.connect(f"file:{os.path.join(store, 'index.sqlite')}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def index_meta(store):
    return dict(index_rows(store, "SELECT key, value FROM meta"))


def pack(src, store, *extra):
    run("pack", src, store, "--progress", "off", *extra)
    return store


@pytest.fixture(scope="session")
def edge_store(edge_tree, tmp_path_factory):
    return pack(edge_tree, str(tmp_path_factory.mktemp("stores") / "edge"))


@pytest.fixture(scope="session")
def imagenet_store(imagenet_tree, tmp_path_factory):
    """The ImageNet-like tree in the scan layout, whose record prefixes the read-path tests measure
    (test_layout.py and the stress test's file variants cover the file layout, pack's default)."""
    return pack(imagenet_tree, str(tmp_path_factory.mktemp("stores") / "imagenet"), "--record-bytes", "1MiB",
                "--layout", "scan")


@pytest.fixture
def mnt(tmp_path):
    """An empty mount point, unmounted after the test whatever happened."""
    from mountutil import unmount

    m = str(tmp_path / "mnt")
    os.makedirs(m)
    yield m
    unmount(m)


@pytest.fixture
def user_mounts():
    """Lets a non-root user mount with allow_other for one test: Debian's /dev/fuse mode (0666;
    a container may have made it 0600) and user_allow_other in /etc/fuse.conf; both restored."""
    if os.geteuid() != 0:
        pytest.skip("needs root to let another user mount with allow_other")
    conf = "/etc/fuse.conf"
    before = open(conf).read() if os.path.exists(conf) else None
    mode = os.stat("/dev/fuse").st_mode & 0o7777
    if before is None or "\nuser_allow_other" not in "\n" + before:
        with open(conf, "a") as f:
            f.write("\nuser_allow_other\n")
    os.chmod("/dev/fuse", 0o666)
    try:
        yield
    finally:
        os.chmod("/dev/fuse", mode)
        if before is None:
            os.unlink(conf)
        else:
            with open(conf, "w") as f:
                f.write(before)


@pytest.fixture(scope="module")
def append_trees(imagenet_tree, tmp_path_factory):
    """`old`: the ImageNet-like tree less every fifth file; `new`: those files plus a new class
    holding two lossless images (L3) and a JPEG; `all`: both together."""
    import random
    import shutil
    sys.path.insert(0, os.path.join(REPO, "tests", "fixtures"))
    from make_tree import photo_like
    from mountutil import walk_files
    root = tmp_path_factory.mktemp("append")
    old, new, both = root / "old", root / "new", root / "all"
    shutil.copytree(imagenet_tree, old, ignore=shutil.ignore_patterns("MANIFEST*"))
    for i, rel in enumerate(walk_files(str(old))):
        if i % 5 == 4:
            (new / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(old / rel), str(new / rel))
    (new / "zz_new").mkdir(parents=True)
    rng = random.Random(7)
    for i in range(2):
        photo_like(rng, 96, 64).save(new / "zz_new" / f"lossless_{i}.png")
    shutil.copy(next(p for p in sorted(old.rglob("*")) if p.is_file()), new / "zz_new" / "copy.jpg")
    shutil.copytree(old, both)
    shutil.copytree(new, both, dirs_exist_ok=True)
    return old, new, both


def wait_stopped(proc, seconds=60):
    """Until the process stops itself (SIGSTOP at its phase): waitpid(WUNTRACED), given `seconds`."""
    import threading
    status = {}
    waiter = threading.Thread(target=lambda: status.update(s=os.waitpid(proc.pid, os.WUNTRACED)[1]), daemon=True)
    waiter.start()
    waiter.join(seconds)
    if waiter.is_alive():
        proc.kill()
        waiter.join()
        raise AssertionError(f"process {proc.pid} did not reach its phase within {seconds} s")
    assert os.WIFSTOPPED(status["s"]), f"process {proc.pid} ended before its phase: status {status['s']}"
