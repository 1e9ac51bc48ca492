"""A mount shared by several users (allow_other): who may change levels and the order seed
(level_changes=), checked with real processes of other uids (setpriv), in both directions."""
import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import fid_bin
from mountutil import mount, mounted

OTHER = 65534       # nobody
OWNER = pwd.getpwnam("www-data").pw_uid  # a non-root user who mounts (fusermount3 wants a name)
USERS_GID = 100     # Debian's "users" group


def as_user(uid, *argv, groups=(), text=True):
    """Runs argv as uid (gid uid unless told) with exactly `groups` as supplementary groups."""
    ids = ["--reuid", str(uid), "--regid", str(uid)]
    ids += ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    return subprocess.run(["setpriv", *ids, *argv], capture_output=True, text=text)


def set_level(uid, path, level, **kw):
    return as_user(uid, "setfattr", "-n", "user.fidelity.scan_group", "-v", str(level), path, **kw)


def get_level(uid, path):
    p = as_user(uid, "getfattr", "--only-values", "-n", "user.fidelity.scan_group", path)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def shared(imagenet_store):
    """A folder every user can reach, holding a copy of the store (other uids read it), the mount
    point and a log file."""
    root = tempfile.mkdtemp(prefix="fid-shared-", dir="/tmp")
    os.chmod(root, 0o755)
    store = os.path.join(root, "store")
    shutil.copytree(imagenet_store, store)
    mnt = os.path.join(root, "mnt")
    os.makedirs(mnt)
    os.chmod(mnt, 0o777)
    try:
        yield root, store, mnt
    finally:
        shutil.rmtree(root, ignore_errors=True)


def log_config(root, extra=""):
    cfg = os.path.join(root, "fid.yaml")
    log = os.path.join(root, "fid.log")
    with open(cfg, "w") as f:
        f.write(f"log:\n  file: {log}\n{extra}")
    os.chmod(cfg, 0o644)
    return cfg, log


def one_file(mnt):
    cls = sorted(d for d in os.listdir(mnt) if not d.startswith("."))[0]
    return cls, sorted(os.listdir(os.path.join(mnt, cls)))[0]


def test_only_the_owner_and_root_change_levels(shared):
    root, store, mnt = shared
    cfg, log = log_config(root)
    with mounted(store, mnt, "-o", f"allow_other,scan_group=5,config={cfg}"):
        cls, name = one_file(mnt)
        folder, path = os.path.join(mnt, cls), os.path.join(mnt, cls, name)
        with open(path, "rb") as f:
            root_bytes = f.read()
        for target in (mnt, folder, path):
            p = set_level(OTHER, target, 1)
            assert p.returncode != 0 and "Operation not permitted" in p.stderr, (target, p.stderr)
            p = as_user(OTHER, "setfattr", "-x", "user.fidelity.scan_group", target)
            assert p.returncode != 0 and "Operation not permitted" in p.stderr, (target, p.stderr)
            assert get_level(OTHER, target) == "5"  # reading stays open to all
        p = as_user(OTHER, "setfattr", "-n", "user.fidelity.order_seed", "-v", "7", mnt)
        assert p.returncode != 0 and "Operation not permitted" in p.stderr
        # A member of the owner's group is no owner.
        assert set_level(OTHER, path, 1, groups=(0,)).returncode != 0
        # Everything else stays open: the other user reads the same bytes, lists, reads stats.
        p = as_user(OTHER, "cat", path, text=False)
        assert p.returncode == 0 and p.stdout == root_bytes
        assert as_user(OTHER, "ls", os.path.join(mnt, ".fidelity", "sg", "2", cls)).returncode == 0
        assert as_user(OTHER, "cat", os.path.join(mnt, ".fidelity", "stats")).returncode == 0
        # Root (here also the owner) changes it.
        assert set_level(0, folder, 2).returncode == 0
        assert get_level(OTHER, path) == "2"
        with open(os.path.join(mnt, ".fidelity", "stats")) as f:
            import json
            stats = json.load(f)
        assert stats["level_changes_refused"] == 8
    with open(log) as f:
        lines = [line for line in f if "refused a level change" in line]
    assert len(lines) == 1, lines  # once per uid
    assert f"uid {OTHER}" in lines[0] and "level_changes=owner" in lines[0]


def test_a_non_root_owner_changes_levels_and_others_do_not(shared, user_mounts):
    root, store, mnt = shared
    cache = os.path.join(root, "cache")
    os.makedirs(cache)
    os.chown(cache, OWNER, OWNER)
    os.chown(mnt, OWNER, OWNER)
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    argv = ["setpriv", "--reuid", str(OWNER), "--regid", str(OWNER), "--clear-groups",
            fid_bin(), "mount", store, mnt, "-o", "allow_other,scan_group=5"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(mounted(store, mnt, argv=argv, env=env))
        cls, name = one_file(mnt)
        path = os.path.join(mnt, cls, name)
        assert set_level(OTHER, path, 1).returncode != 0
        assert set_level(OWNER, path, 3).returncode == 0
        assert get_level(OTHER, path) == "3"
        assert set_level(0, path, 4).returncode == 0  # root
        assert get_level(OWNER, path) == "4"
        assert as_user(OTHER, "setfattr", "-x", "user.fidelity.scan_group", path).returncode != 0
        assert as_user(OWNER, "setfattr", "-x", "user.fidelity.scan_group", path).returncode == 0
        assert get_level(OTHER, path) == "5"


def test_level_changes_anyone_and_group(shared):
    root, store, mnt = shared
    with mounted(store, mnt, "-o", "allow_other,scan_group=5,level_changes=anyone"):
        cls, name = one_file(mnt)
        path = os.path.join(mnt, cls, name)
        assert set_level(OTHER, path, 1).returncode == 0
        assert get_level(0, path) == "1"
        assert as_user(OTHER, "setfattr", "-n", "user.fidelity.order_seed", "-v", "9", mnt).returncode == 0
    cfg, _ = log_config(root, "level_changes: group=users\n")
    with mounted(store, mnt, "-o", f"allow_other,scan_group=5,config={cfg}"):
        path = os.path.join(mnt, cls, name)
        assert set_level(OTHER, path, 1).returncode != 0
        assert set_level(OTHER, path, 2, groups=(USERS_GID,)).returncode == 0
        assert get_level(OTHER, path) == "2"
        with open(os.path.join(mnt, ".fidelity", "config")) as f:
            import json
            assert json.load(f)["level_changes"] == "group=users"


def test_a_group_that_does_not_exist_is_a_usage_error(shared):
    _, store, mnt = shared
    p = mount(store, mnt, "-o", "allow_other,level_changes=group=no-such-group-fid", check=False)
    assert p.returncode == 2
    assert "level_changes=group=no-such-group-fid: no such group" in p.stderr
    p = mount(store, mnt, "-o", "level_changes=everyone", check=False)
    assert p.returncode == 2
    assert "bad value for mount option level_changes: 'everyone'" in p.stderr
