"""What another local user can do to, or learn from, a mount (root mounting with allow_other on
a shared machine): the cache folders the daemon makes are private (folders 0700, files 0600)
whatever the umask; a cache folder another user could write to is refused (the tables then stay
in memory with a warning; a disk cache is a mount error); symbolic links planted under the names
the caches use are never followed; /.fidelity/config and stats hold no credential."""
import contextlib
import json
import os
import stat

import pytest

import remote_servers
from fidstore import Store
from mountutil import mount, unmount

KEY_ID = "AKIAFIDSECURITYTEST1"
SECRET = "fid-security-s3cr3t-never-shown"
TOKEN = "fid-security-session-token-never-shown"


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@contextlib.contextmanager
def umask(value):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def expect_reads(mnt, store, rels, level=None):
    """Every file of `rels` reads as the store holds it (L3 files, decoded views, are read only)."""
    for rel in rels:
        with open(os.path.join(mnt, rel), "rb") as f:
            data = f.read()
        if store.files[rel]["kind"] != "l3":
            assert data == store.read(rel, level), rel


def env_with_cache(xdg):
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = xdg
    return env


def plant_links(folder, names, target):
    for name in names:
        path = os.path.join(folder, name)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)


def write_target(path):
    with open(path, "w") as f:
        f.write(SECRET)
    return os.stat(path).st_mtime_ns


def target_untouched(path, mtime_ns):
    with open(path) as f:
        assert f.read() == SECRET
    assert os.stat(path).st_mtime_ns == mtime_ns


def mount_read_unmount(store_dir, mnt, env, store, rels):
    """Mounts under umask 0 with no warning, checks the bytes of `rels`, unmounts."""
    with umask(0):
        p = mount(store_dir, mnt, env=env)
    try:
        assert "warning" not in p.stderr, p.stderr
        expect_reads(mnt, store, rels)
    finally:
        unmount(mnt)


def test_tables_cache_is_private_refuses_a_shared_folder_and_follows_no_link(edge_store, tmp_path):
    store = Store(edge_store)
    rels = sorted(store.files)[:30]
    xdg = str(tmp_path / "xdg")
    env = env_with_cache(xdg)
    tables = os.path.join(xdg, "fidelityfs", "tables")
    mnt = str(tmp_path / "mnt")
    mount_read_unmount(edge_store, mnt, env, store, rels)
    for folder in (xdg, os.path.join(xdg, "fidelityfs"), tables):
        assert mode(folder) == 0o700, folder
    names = os.listdir(tables)
    assert len(names) == 1 and names[0].endswith(".tables")
    assert mode(os.path.join(tables, names[0])) == 0o600

    # Symbolic links under the tables file's name and its temporary name: replaced, never
    # written through.
    target = str(tmp_path / "target")
    mtime = write_target(target)
    hex_name = names[0][: -len(".tables")]
    plant_links(tables, [names[0], "%s.tables.tmp-%d" % (hex_name, os.getpid())], target)
    mount_read_unmount(edge_store, mnt, env, store, rels)
    target_untouched(target, mtime)
    assert not os.path.islink(os.path.join(tables, names[0]))
    assert mode(os.path.join(tables, names[0])) == 0o600

    # A tables folder other users can write to (a tables file there could be forged): refused,
    # the tables stay in memory, the mount says why on stderr.
    os.chmod(tables, 0o777)
    p = mount(edge_store, mnt, env=env)
    try:
        assert f"warning: tables cache {tables}: writable by other users (mode 0777) without the sticky bit; " \
               "refusing to use it (the store's tables stay in the daemon's memory)" in p.stderr, p.stderr
        expect_reads(mnt, store, rels)
    finally:
        unmount(mnt)
    assert mode(tables) == 0o777


@pytest.fixture(scope="module")
def http_store(edge_store):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    with remote_servers.http_server(os.path.dirname(edge_store)) as srv:
        yield f"{srv.url}/{os.path.basename(edge_store)}"


def read_order(mnt):
    with open(os.path.join(mnt, ".fidelity", "order", "epoch-0")) as f:
        rels = f.read().splitlines()
    for rel in rels:
        with open(os.path.join(mnt, rel), "rb") as f:
            f.read()
    return rels


def test_disk_cache_is_private_refuses_a_shared_folder_and_follows_no_link(http_store, edge_store, tmp_path):
    store = Store(edge_store)
    dc = str(tmp_path / "dc")
    env = env_with_cache(str(tmp_path / "xdg"))
    mnt = str(tmp_path / "mnt")
    opts = ("-o", f"disk_cache={dc},disk_cache_size=1GiB,random_reads=records")
    with umask(0):
        mount(http_store, mnt, *opts, env=env)
    try:
        rels = read_order(mnt)
        expect_reads(mnt, store, rels)
    finally:
        unmount(mnt)
    assert mode(dc) == 0o700
    folders = [d for d in os.listdir(dc) if os.path.isdir(os.path.join(dc, d)) and d != "tables"]
    assert len(folders) == 1
    entries_dir = os.path.join(dc, folders[0])
    assert mode(entries_dir) == 0o700
    assert mode(os.path.join(dc, "tables")) == 0o700
    entries = [n for n in os.listdir(entries_dir) if n.endswith(".p")]
    assert entries
    for n in entries:
        assert mode(os.path.join(entries_dir, n)) == 0o600, n
    for n in os.listdir(dc):
        if os.path.isfile(os.path.join(dc, n)):
            assert mode(os.path.join(dc, n)) == 0o600, n

    # Every entry, the lock file, and entries of records not cached yet, as links to one file
    # outside: every read returns the right bytes, and the file is never written or touched.
    target = str(tmp_path / "target")
    mtime = write_target(target)
    records = {store.files[r]["record"] for r in store.files}
    plant_links(entries_dir, [f"{r}.p" for r in records], target)
    plant_links(dc, [".lock"], str(tmp_path / "lock-target"))
    mount(http_store, mnt, *opts, env=env)
    try:
        rels = read_order(mnt)
        expect_reads(mnt, store, rels)
        expect_reads(mnt, store, rels)
    finally:
        unmount(mnt)
    target_untouched(target, mtime)
    assert not os.path.exists(tmp_path / "lock-target")
    assert not any(os.path.islink(os.path.join(entries_dir, n)) for n in os.listdir(entries_dir) if n.endswith(".p"))

    # A disk cache folder other users can write to: the mount fails, naming it and why.
    shared = str(tmp_path / "shared")
    os.makedirs(shared)
    os.chmod(shared, 0o777)
    p = mount(http_store, str(tmp_path / "mnt2"), "-o", f"disk_cache={shared}", env=env, check=False)
    assert p.returncode == 1, p.stderr
    assert f"disk cache {shared}: writable by other users (mode 0777) without the sticky bit; refusing to use it" \
        in p.stderr, p.stderr
    assert os.listdir(shared) == []
    if os.geteuid() == 0:
        other = str(tmp_path / "other")
        os.makedirs(other, mode=0o700)
        os.chown(other, 65534, 65534)
        p = mount(http_store, str(tmp_path / "mnt3"), "-o", f"disk_cache={other}", env=env, check=False)
        assert p.returncode == 1 and f"disk cache {other}: owned by uid 65534" in p.stderr, p.stderr


def test_config_and_stats_hold_no_credential(http_store, edge_store, tmp_path):
    env = env_with_cache(str(tmp_path / "xdg"))
    env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_SESSION_TOKEN=TOKEN)
    for location in (edge_store, http_store):
        mnt = str(tmp_path / ("mnt-" + location.split(":")[0].strip("/").replace("/", "_")))
        mount(location, mnt, "-o", f"disk_cache={tmp_path / 'dc'}" if "://" in location else "scan_group=full",
              env=env)
        try:
            for name in ("config", "stats"):
                with open(os.path.join(mnt, ".fidelity", name)) as f:
                    text = f.read()
                json.loads(text)
                for secret in (KEY_ID, SECRET, TOKEN):
                    assert secret not in text, (name, secret)
        finally:
            unmount(mnt)
