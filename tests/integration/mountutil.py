"""Real mounts for the integration tests: `fidelityfs mount` returns only once the mount
answers, so no test waits or polls for readiness; every mount is unmounted in a finalizer."""
import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import time

from conftest import fid_bin


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def unmount(mnt):
    if not is_mounted(mnt):
        return
    if subprocess.run(["fusermount3", "-u", mnt], capture_output=True).returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)


def daemon_pid(mnt):
    """Pid of the fidelityfs daemon serving mnt (from /proc/*/cmdline)."""
    mnt = os.path.realpath(mnt)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[1] == b"mount" and os.path.basename(argv[0]) == b"fidelityfs" and \
                os.path.realpath(argv[3].decode()) == mnt:
            return int(pid)
    return None


def mount(store, mnt, *args, check=True, env=None, argv=None):
    """`fidelityfs mount STORE MNT ARGS`, or `argv` when given (a mount through mount(8))."""
    os.makedirs(mnt, exist_ok=True)
    # scripts/test.sh runs a pass under each transport; io_uring is an opt-in (transport=auto is
    # /dev/fuse), so the uring pass asks for it where a test chose none.
    expected = os.environ.get("FIDELITYFS_TEST_TRANSPORT")
    chosen = any("transport=" in str(a) for a in (argv or args))
    if expected == "uring" and argv is None and not chosen:
        args = (*args, "-o", "transport=uring")
    argv = argv or [fid_bin(), "mount", store, mnt, *args]
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"mount failed ({p.returncode}): {p.stderr}")
    if expected and p.returncode == 0 and is_mounted(mnt) and not chosen:
        expected = "dev" if argv[0] != fid_bin() else expected  # mount(8)'s options are the test's own
        with open(os.path.join(mnt, ".fidelity", "stats")) as f:
            used = json.load(f)["transport"]
        assert used.split(" ")[0] == expected, f"{mnt}: transport {used!r}, expected {expected}"
    return p


def wait_exit(pid, seconds):
    """Waits (bounded) until process pid has exited, on a pidfd: it turns readable once the whole
    process has exited, zombie or reaped. True if it did. Reaps it if it is our child."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        if not select.select([fd], [], [], seconds)[0]:
            return False
    finally:
        os.close(fd)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True


def wait_invalidations(mnt, seconds=20):
    """Polls (bounded) the daemon's stats until its background entry invalidations are done (a
    level change on a folder drops some entries just after its reply); True if they are."""
    import json
    deadline = time.monotonic() + seconds
    while True:
        with open(os.path.join(mnt, ".fidelity", "stats")) as f:
            if json.load(f)["invalidations_pending"] == 0:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def fuse_connection(mnt):
    """The id of the FUSE connection serving mnt (its device's minor number)."""
    return os.minor(os.stat(mnt).st_dev)


@contextlib.contextmanager
def fusectl():
    """The kernel's FUSE control folder, /sys/fs/fuse/connections, mounted for the block if it
    is not (and unmounted after it then)."""
    ctl = "/sys/fs/fuse/connections"
    mounted_here = not os.listdir(ctl) and \
        subprocess.run(["mount", "-t", "fusectl", "fusectl", ctl], capture_output=True).returncode == 0
    try:
        yield ctl
    finally:
        if mounted_here:
            subprocess.run(["umount", ctl], capture_output=True)


def abort_connection(conn):
    """Aborts FUSE connection `conn` through fusectl: every request waiting on it fails with
    ENOTCONN, so threads stuck on a hung daemon come back. The last resort of a cleanup."""
    with fusectl() as ctl:
        try:
            with open(os.path.join(ctl, str(conn), "abort"), "w") as f:
                f.write("1")
        except OSError:
            pass


@contextlib.contextmanager
def mounted(store, mnt, *args, **kw):
    mount(store, mnt, *args, **kw)
    conn, pid = fuse_connection(mnt), daemon_pid(mnt)  # now, while the mount answers
    try:
        yield mnt
    finally:
        unmount(mnt)
        # The daemon exits once unmounted; kill a stuck one, and if even that leaves it (threads
        # blocked in the kernel on a deadlocked connection) abort the connection.
        if pid and not wait_exit(pid, 2):
            os.kill(pid, signal.SIGKILL)
            if not wait_exit(pid, 2):
                abort_connection(conn)
                wait_exit(pid, 5)


def walk_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def read_all(mnt, rels):
    """{rel: bytes} of the files `rels` under mnt, read whole."""
    out = {}
    for rel in rels:
        with open(os.path.join(mnt, rel), "rb") as f:
            out[rel] = f.read()
    return out


def walk_dirs(root):
    out = []
    for d, dirs, _ in os.walk(root):
        for x in dirs:
            out.append(os.path.relpath(os.path.join(d, x), root))
    return sorted(out)


@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of `size` (mount(8) syntax: 2m, 8388608) at path, unmounted whatever happens;
    resize it with remount_tmpfs. Skips the test where tmpfs cannot be mounted (not root)."""
    import pytest

    os.makedirs(path, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {p.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)


def remount_tmpfs(path, size):
    subprocess.run(["mount", "-o", f"remount,size={size}", path], check=True, capture_output=True)


def proc_status(pid, key):
    """A /proc/PID/status figure in bytes (VmRSS, VmHWM, ...), or a count (Threads)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                parts = line.split()
                return int(parts[1]) * (1024 if len(parts) > 2 and parts[2] == "kB" else 1)
    raise KeyError(key)


def read_file(path, chunk=0):
    """All bytes of path: one buffered read, or unbuffered reads of `chunk` bytes each (many
    small requests through the page cache)."""
    if not chunk:
        with open(path, "rb") as f:
            return f.read()
    parts = []
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                return b"".join(parts)
            parts.append(b)


XA = "user.fidelity.scan_group"


def flip_level(mnt, rng, rels, dirs, levels):
    """One random level change on a mount: set a folder's or a file's level (xattr), or remove a
    file's override; what the concurrency tests do while others read. Raises OSError on failure."""
    level = str(rng.randint(1, levels)).encode()
    r = rng.random()
    if r < 0.3:
        os.setxattr(os.path.join(mnt, rng.choice(dirs)), XA, level)
    elif r < 0.4:
        try:
            os.removexattr(os.path.join(mnt, rng.choice(rels)), XA)
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
    else:
        os.setxattr(os.path.join(mnt, rng.choice(rels)), XA, level)


def read_concurrently(mnt, rels, threads, seconds=120):
    """Reads every rel (relative to mnt) whole with `threads` threads, each taking the next file of
    the list in turn; returns (bytes by rel, rels that failed with EIO). Any other error fails the
    test, and so does a reader not back within `seconds` (hung)."""
    import threading
    it, lock, got, eio, other = iter(rels), threading.Lock(), {}, [], []

    def work():
        while True:
            with lock:
                rel = next(it, None)
            if rel is None:
                return
            try:
                with open(os.path.join(mnt, rel), "rb") as f:
                    got[rel] = f.read()
            except OSError as e:
                if e.errno == errno.EIO:
                    eio.append(rel)
                else:
                    other.append(f"{rel}: {e}")

    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=seconds)
    assert not any(t.is_alive() for t in ts), "a reader hung"
    assert other == [], other[:5]
    return got, eio
