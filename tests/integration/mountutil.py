"""Real mounts for the integration tests: `fidelityfs mount` returns only once the mount
answers, so no test waits or polls for readiness; every mount is unmounted in a finalizer."""
import contextlib
import os
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


def mount(store, mnt, *args, check=True):
    os.makedirs(mnt, exist_ok=True)
    p = subprocess.run([fid_bin(), "mount", store, mnt, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"mount failed ({p.returncode}): {p.stderr}")
    return p


@contextlib.contextmanager
def mounted(store, mnt, *args):
    mount(store, mnt, *args)
    try:
        yield mnt
    finally:
        pid = daemon_pid(mnt)
        unmount(mnt)
        if pid:  # the daemon exits once unmounted; reap a stuck one
            for _ in range(200):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.01)
            else:
                os.kill(pid, signal.SIGKILL)


def walk_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.relpath(os.path.join(d, f), root))
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
