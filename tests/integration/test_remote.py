"""Stores in object storage and on HTTP servers, read through real servers: Ceph RADOS Gateway
(s3://), nginx (http://, and https:// with a test CA) and the fault proxy in front of them.
Every byte a reader gets is compared with the packed store read by fidstore.py (an independent
reader of the format)."""
import contextlib
import json
import os
import signal
import subprocess
import threading
import time

import pytest

import remote_servers
from remote_servers import aws
from conftest import fid_bin, pack, run
from fidstore import Store
from mountutil import daemon_pid, mounted, mount, read_all, read_concurrently, unmount, wait_exit, walk_files

BUCKET = "fid-remote"
SECRET_MARK = "s3cr3t-never-printed"


def stats(mnt):
    with open(os.path.join(mnt, ".fidelity", "stats")) as f:
        return json.load(f)


def expect_bytes(store, rels, level=None):
    return {rel: store.read(rel, level) for rel in rels}


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    """The index cache of every mount in this module (XDG_CACHE_HOME), not the user's."""
    d = str(tmp_path_factory.mktemp("xdg-cache"))
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = d
    yield d
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="module")
def remote_store(imagenet_tree, tmp_path_factory):
    """A store of the ImageNet-like tree with small records (many GETs), packed for this module, in
    the scan layout (a file at level k is k + 1 GETs); remote_file_store is the file layout's."""
    return pack(imagenet_tree, str(tmp_path_factory.mktemp("remote") / "store"), "--record-bytes", "512KiB",
                "--layout", "scan")


@pytest.fixture(scope="module")
def remote_file_store(imagenet_tree, remote_store):
    """remote_store in the file layout, beside it (the servers serve that folder): a file at any
    level is one GET."""
    return pack(imagenet_tree, os.path.join(os.path.dirname(remote_store), "file-store"), "--record-bytes", "512KiB",
                "--layout", "file")


@pytest.fixture(scope="module")
def rgw(tmp_path_factory, cache_home):
    why = remote_servers.missing_s3_server()
    if why:
        pytest.skip(why)
    with remote_servers.s3_server(str(tmp_path_factory.mktemp("rgw") / "s3")) as env, remote_servers.exported(env):
        yield env


def upload(env, store_dir, url, index=True):
    """The documented upload: records first, the index last, with the standard tool."""
    aws(env, "s3", "cp", "--recursive", "--only-show-errors", os.path.join(store_dir, "records"), url + "/records")
    if index:
        aws(env, "s3", "cp", "--only-show-errors", os.path.join(store_dir, "index.sqlite"), url + "/index.sqlite")


@pytest.fixture(scope="module")
def s3_url(rgw, remote_store):
    aws(rgw, "s3", "mb", f"s3://{BUCKET}")
    url = f"s3://{BUCKET}/datasets/imagenet"
    upload(rgw, remote_store, url)
    return url


def test_s3_mount_reads_every_file_at_two_levels(s3_url, remote_store, tmp_path):
    store = Store(remote_store)
    rels = sorted(store.files)
    for level, opt in ((3, "scan_group=3"), (None, "scan_group=full")):
        mnt = str(tmp_path / f"m{level}")
        with mounted(s3_url, mnt, "-o", opt):
            assert sorted(walk_files(mnt)) == rels
            got = read_all(mnt, rels)
            want = expect_bytes(store, rels, level)
            wrong = [r for r in rels if got[r] != want[r]]
            assert wrong == []
            s = stats(mnt)
            assert s["store"] == s3_url
            assert s["storage_reads"] > 0
            assert s["eio_errors"] == 0
            for name in ("stats", "config"):  # no secret in what the mount shows
                with open(os.path.join(mnt, ".fidelity", name)) as f:
                    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in f.read()


def test_s3_inspect_and_verify_take_the_url(s3_url, remote_store):
    local = json.loads(run("inspect", remote_store, "--json").stdout)
    remote = json.loads(run("inspect", s3_url, "--json").stdout)
    for key in ("files", "records", "levels", "bytes_by_level", "source_bytes", "store_bytes"):
        assert remote[key] == local[key], key
    assert remote["problems"] == []
    p = run("verify", s3_url)
    assert f"verified {local['files']} files, 0 bad" in p.stdout


def test_s3_index_is_cached_by_etag(s3_url, cache_home, tmp_path):
    """A second mount finds the index in the cache (same ETag) and still sees an updated one."""
    before = {os.path.join(d, f) for d, _, fs in os.walk(cache_home) for f in fs}
    with mounted(s3_url, str(tmp_path / "a")):
        pass
    cached = {os.path.join(d, f) for d, _, fs in os.walk(cache_home) for f in fs}
    assert len(cached) >= 1 and cached >= before
    with mounted(s3_url, str(tmp_path / "b")):
        pass
    assert {os.path.join(d, f) for d, _, fs in os.walk(cache_home) for f in fs} == cached


def test_s3_credentials_from_a_profile(rgw, s3_url, remote_store, tmp_path):
    """No AWS_* keys in the environment: the credentials come from AWS_PROFILE in the shared
    credentials file, the region and endpoint from the config file's profile."""
    creds, conf = tmp_path / "credentials", tmp_path / "config"
    creds.write_text(f"[lab]\naws_access_key_id = {rgw['AWS_ACCESS_KEY_ID']}\n"
                     f"aws_secret_access_key = {rgw['AWS_SECRET_ACCESS_KEY']}\n")
    conf.write_text(f"[profile lab]\nregion = {rgw['AWS_REGION']}\nendpoint_url = {rgw['AWS_ENDPOINT_URL']}\n")
    saved = dict(os.environ)
    try:
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION"):
            os.environ.pop(k, None)
        os.environ.update(AWS_PROFILE="lab", AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(conf))
        store = Store(remote_store)
        rel = sorted(store.files)[0]
        with mounted(s3_url, str(tmp_path / "m")) as mnt:
            with open(os.path.join(mnt, rel), "rb") as f:
                assert f.read() == store.read(rel)
        os.environ["AWS_PROFILE"] = "nobody"
        p = mount(s3_url, str(tmp_path / "n"), check=False)
        assert p.returncode == 1 and "nobody" in p.stderr
        unmount(str(tmp_path / "n"))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def mount_error(url, mnt, *args, env=None):
    old = dict(os.environ)
    try:
        if env:
            os.environ.update(env)
        p = mount(url, mnt, *args, check=False)
    finally:
        os.environ.clear()
        os.environ.update(old)
    unmount(mnt)
    return p


def test_s3_mount_failures_name_the_cause_and_no_secret(rgw, s3_url, remote_store, tmp_path):
    mnt = str(tmp_path / "m")
    # Wrong secret: access denied, and the secret never printed.
    p = mount_error(s3_url, mnt, env={"AWS_SECRET_ACCESS_KEY": SECRET_MARK})
    assert p.returncode == 1
    assert SECRET_MARK not in p.stderr + p.stdout
    assert "403" in p.stderr or "denied" in p.stderr.lower() or "signature" in p.stderr.lower()
    # A bucket that does not exist.
    p = mount_error("s3://fid-no-such-bucket/x", mnt)
    assert p.returncode == 1 and "fid-no-such-bucket" in p.stderr
    # An endpoint nobody answers on (a loopback port with no listener).
    p = mount_error(s3_url, mnt, "-o", "endpoint=http://127.0.0.1:9")
    assert p.returncode == 1 and "127.0.0.1:9" in p.stderr
    # A half-uploaded store: records only, no index.
    half = f"s3://{BUCKET}/half"
    upload(rgw, remote_store, half, index=False)
    p = mount_error(half, mnt)
    assert p.returncode == 1 and "index.sqlite" in p.stderr
    # The index and all records but one.
    gone = f"s3://{BUCKET}/gone"
    upload(rgw, remote_store, gone)
    first = Store(remote_store).records[0][0]
    aws(rgw, "s3", "rm", "--only-show-errors", f"{gone}/{first}")
    p = mount_error(gone, mnt)
    assert p.returncode == 1 and first in p.stderr
    # Usage errors exit 2.
    p = mount_error("gs://bucket/x", mnt)
    assert p.returncode == 2 and "gs://" in p.stderr


@pytest.fixture(scope="module")
def nginx(remote_store, tmp_path_factory):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    with remote_servers.http_server(os.path.dirname(remote_store)) as srv:
        yield srv


@pytest.fixture(scope="module")
def nginx_tls(remote_store, tmp_path_factory):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    with remote_servers.http_server(os.path.dirname(remote_store), tls=True) as srv:
        yield srv


def test_http_and_https_mounts_read_every_file(nginx, nginx_tls, remote_store, cache_home, tmp_path):
    store = Store(remote_store)
    rels = sorted(store.files)
    name = os.path.basename(remote_store)
    for url, args in ((f"{nginx.url}/{name}", ()), (f"{nginx_tls.url}/{name}", ("-o", f"ca_file={nginx_tls.ca}"))):
        mnt = str(tmp_path / url.split(":")[0])
        with mounted(url, mnt, *args, "-o", "scan_group=2"):
            got = read_all(mnt, rels)
            assert [r for r in rels if got[r] != store.read(r, 2)] == []
    # https without the test CA: the certificate is refused, and the message says so.
    p = mount_error(f"{nginx_tls.url}/{name}", str(tmp_path / "noca"))
    assert p.returncode == 1 and "certificate" in p.stderr.lower()


def read_all_or_eio(mnt, rels):
    """Reads every file; returns (bytes by file, files that failed with EIO). Other errors raise."""
    got, eio = {}, []
    for rel in rels:
        try:
            with open(os.path.join(mnt, rel), "rb") as f:
                got[rel] = f.read()
        except OSError as e:
            if e.errno != 5:
                raise
            eio.append(rel)
    return got, eio


@pytest.mark.parametrize("random_reads", ["pieces", "records"])
@pytest.mark.parametrize("fault", [
    dict(mode="status", code=503, count=40),
    dict(mode="status", code=500, p=0.3),
    dict(mode="reset", p=0.3),
    dict(mode="truncate", p=0.3),
])
def test_faults_never_give_wrong_bytes(fault, random_reads, nginx, remote_store, cache_home, tmp_path):
    """503 storms, 500s, connection resets and truncated bodies between the mount and nginx, in
    both random_reads modes: every read returns the right bytes (retries), the daemon stays up,
    and retries are counted."""
    check_faults(remote_store, fault, random_reads, nginx, tmp_path)


@pytest.mark.parametrize("random_reads", ["pieces", "records"])
@pytest.mark.parametrize("fault", [
    dict(mode="status", code=503, count=7),
    dict(mode="status", code=500, p=0.3),
    dict(mode="reset", p=0.3),
    dict(mode="truncate", p=0.3),
])
def test_faults_never_give_wrong_bytes_in_the_file_layout(fault, random_reads, nginx, remote_file_store, cache_home,
                                                          tmp_path):
    """The same faults over a file-layout store, where a read is one GET a file (in records mode,
    a GET a file of the record). The test reads one file at a time, so a storm of 503s lands on
    one request: 7 in a row is the most one request rides out (8 attempts, docs/MOUNT.md); the
    scan layout's 40 are spread over a read's k + 1 GETs."""
    check_faults(remote_file_store, fault, random_reads, nginx, tmp_path)


def check_faults(store_dir, fault, random_reads, nginx, tmp_path):
    store = Store(store_dir)
    rels = sorted(store.files)
    name = os.path.basename(store_dir)
    host, port = nginx.host, nginx.port
    with remote_servers.fault_proxy(host, port, seed=7) as proxy:
        mnt = str(tmp_path / "m")
        with mounted(f"{proxy.url}/{name}", mnt, "-o", f"scan_group=4,random_reads={random_reads}"):
            pid = daemon_pid(mnt)
            proxy.set(**fault)
            got, eio = read_all_or_eio(mnt, rels)
            proxy.set(mode="none")
            assert eio == []
            assert [r for r in rels if got[r] != store.read(r, 4)] == []
            assert daemon_pid(mnt) == pid
            assert proxy.stats()["faults"] > 0
            assert stats(mnt)["storage_retries"] > 0


@contextlib.contextmanager
def proxied_mount(nginx, store_dir, tmp_path, *opts):
    """store_dir served by nginx behind a fault proxy, mounted: yields (Store, proxy, mount point)."""
    with remote_servers.fault_proxy(nginx.host, nginx.port) as proxy:
        mnt = str(tmp_path / "m")
        with mounted(f"{proxy.url}/{os.path.basename(store_dir)}", mnt, *opts):
            yield Store(store_dir), proxy, mnt


def test_stall_is_reissued(nginx, remote_store, cache_home, tmp_path):
    """A 30 s stall of a response body: the request is re-issued after the stall timeout, so the
    read still returns the right bytes, well before the stall would have ended."""
    with proxied_mount(nginx, remote_store, tmp_path) as (store, proxy, mnt):
        rel = sorted(store.files)[0]
        proxy.set(mode="stall", seconds=30, count=1)
        with open(os.path.join(mnt, rel), "rb") as f:
            assert f.read() == store.read(rel)
        assert proxy.stats()["faults"] == 1
        assert stats(mnt)["storage_retries"] >= 1


def test_a_trickle_is_cut_and_asked_again(nginx, remote_store, cache_home, tmp_path):
    """A response trickling 2 bytes a second (enough to stay above the stall limit) is abandoned
    at its attempt's deadline (10 s floor, docs/MOUNT.md "Retries") and its missing bytes asked
    again: the read returns the right bytes instead of waiting for days."""
    with proxied_mount(nginx, remote_store, tmp_path, "-o", "random_reads=pieces") as (store, proxy, mnt):
        rel = sorted(store.files)[0]
        proxy.set(mode="trickle", rate=2, count=1, match="/records/")
        got = []
        t0 = time.monotonic()
        reader = threading.Thread(target=lambda: got.append(open(os.path.join(mnt, rel), "rb").read()), daemon=True)
        reader.start()
        reader.join(60)  # bounded: a read held by the trickle never returns
        took = time.monotonic() - t0
        assert got == [store.read(rel)], f"no read after {took:.0f} s"
        assert proxy.stats()["faults"] == 1
        assert stats(mnt)["storage_retries"] >= 1
    assert 9 < took < 30, took  # cut at the deadline, not at the end of the trickle (about 3 days)


def test_a_trickling_index_fails_inspect_and_mount_within_the_retry_budget(nginx, remote_store, tmp_path):
    """index.sqlite sent at 2 bytes a second: every attempt is cut at its deadline and the request
    ends with the retry budget (35 s, docs/MOUNT.md "Retries"), naming the index, instead of
    waiting for the end of the trickle (days). inspect and mount meet it at once, side by side."""
    name = os.path.basename(remote_store)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))  # no cached copy to revalidate
    with remote_servers.fault_proxy(nginx.host, nginx.port) as proxy:
        proxy.set(mode="trickle", rate=2, match="index.sqlite")
        url = f"{proxy.url}/{name}"
        mnt = tmp_path / "m"
        mnt.mkdir()
        t0 = time.monotonic()
        procs = [subprocess.Popen([fid_bin(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for args in (("inspect", url), ("mount", url, str(mnt)))]
        try:
            outs = [p.communicate(timeout=90) for p in procs]
        finally:
            for p in procs:
                p.kill()
        took = time.monotonic() - t0
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 1 and "index.sqlite" in err, (p.args, p.returncode, out, err)
    assert took < 60, took
    assert not os.path.ismount(mnt)


def test_a_storm_of_slow_down_replies_costs_time_not_attempts(nginx, remote_file_store, cache_home, tmp_path):
    """20 "503 SlowDown" replies in a row to one file's GET (the file layout: one GET a file; more
    than the 8 attempts a request has): throttling spends the time budget (35 s; the backoffs of
    20 retries add up to 31 s at most), not the attempts, so the read returns the right bytes."""
    with proxied_mount(nginx, remote_file_store, tmp_path, "-o", "random_reads=pieces") as (store, proxy, mnt):
        rel = sorted(store.files)[1]
        proxy.set(mode="status", code=503, count=20, match="/records/")
        with open(os.path.join(mnt, rel), "rb") as f:
            assert f.read() == store.read(rel)
        assert proxy.stats()["faults"] == 20
        assert stats(mnt)["storage_retries"] >= 20


def test_sigterm_ends_the_daemon_at_once_during_a_trickle(nginx, remote_store, cache_home, tmp_path):
    """A read held by a trickling server does not hold the shutdown: SIGTERM cancels the requests
    on the wire, and the daemon has exited within 3 s."""
    with proxied_mount(nginx, remote_store, tmp_path, "-o", "random_reads=pieces") as (store, proxy, mnt):
        rel = sorted(store.files)[2]
        pid = daemon_pid(mnt)
        proxy.set(mode="trickle", rate=2, match="/records/")
        proxy.reset_stats()

        def read_held():  # held by the trickle, then EIO (or the connection gone)
            try:
                read_all(mnt, [rel])
            except OSError:
                pass

        reader = threading.Thread(target=read_held, daemon=True)
        reader.start()
        assert proxy.wait_fault(30), "the read reached no trickle"
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        assert wait_exit(pid, 10), "the daemon still runs 10 s after SIGTERM"
        took = time.monotonic() - t0
        reader.join(10)
    assert took < 3, took


def test_a_record_corrupted_in_transit_is_forgotten_once_the_fault_ends(nginx, remote_store, cache_home, tmp_path):
    """random_reads=records: a record's load comes back with a byte flipped (the fault proxy's
    corrupt mode). Its damaged file fails (EIO, never wrong bytes) while the damage lasts; once
    the fault has ended every file of the record reads right, with no level change or remount."""
    with proxied_mount(nginx, remote_store, tmp_path, "-o", "random_reads=records") as (store, proxy, mnt):
        by_record = {}
        for rel, f in store.files.items():
            by_record.setdefault(f["record"], []).append(rel)
        rels = sorted(max(by_record.values(), key=len))
        proxy.set(mode="corrupt", match="/records/")  # every transfer of a record, range or whole
        got, eio = read_concurrently(mnt, rels, 4, seconds=60)
        assert eio, "the damage reached a file"
        assert [r for r in rels if r in got and got[r] != store.read(r)] == [], "never wrong bytes"
        proxy.set(mode="none")
        got, eio = read_concurrently(mnt, rels, 4, seconds=60)
        assert eio == [] and [r for r in rels if got[r] != store.read(r)] == []


def test_ctrl_c_stops_relayout_during_a_trickle(nginx, remote_store, cache_home, tmp_path):
    """relayout reading an http:// store whose records trickle: SIGINT ends it within 3 s (its
    requests on the wire are cancelled), exit non-zero, and nothing is left at the target."""
    name = os.path.basename(remote_store)
    with remote_servers.fault_proxy(nginx.host, nginx.port) as proxy:
        proxy.set(mode="trickle", rate=2, match="/records/", method="GET")  # the records' GETs, not the HEADs
        out = tmp_path / "out"
        p = subprocess.Popen([fid_bin(), "relayout", f"{proxy.url}/{name}", str(out), "--layout", "file", "--progress",
                              "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proxy.wait_fault(60), "relayout reached no trickle"
            t0 = time.monotonic()
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
            took = time.monotonic() - t0
        finally:
            p.kill()
    assert p.returncode not in (0, None) and ("interrupted" in err or "cancelled" in err), (p.returncode, err)
    assert took < 3, took
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_server_restart_mid_epoch(nginx, remote_store, cache_home, tmp_path):
    """The server goes away and comes back while files are read: each read returns the right
    bytes or EIO (retries used up), never wrong bytes, and the daemon stays up."""
    store = Store(remote_store)
    rels = sorted(store.files)
    name = os.path.basename(remote_store)
    mnt = str(tmp_path / "m")
    with mounted(f"{nginx.url}/{name}", mnt, "-o", "cache=0"):
        pid = daemon_pid(mnt)
        results, stop = [], threading.Event()

        def reader():
            while not stop.is_set():
                results.append(read_all_or_eio(mnt, rels))

        t = threading.Thread(target=reader)
        t.start()
        try:
            for _ in range(3):
                nginx.restart()
        finally:
            stop.set()
            t.join(timeout=300)
        assert not t.is_alive()
        for got, eio in results:
            assert [r for r in got if got[r] != store.read(r)] == []
            assert len(got) + len(eio) == len(rels)
        assert daemon_pid(mnt) == pid
        # Once the server is back every file reads.
        got3, eio3 = read_all_or_eio(mnt, rels)
        assert eio3 == [] and [r for r in rels if got3[r] != store.read(r)] == []


def test_slow_link_in_a_namespace(remote_store, cache_home, tmp_path):
    """nginx and the proxy in a network namespace the test made, behind a 100 Mbit/s tc tbf link
    and 20 ms per request: every file reads right in random order and in published order; in
    order the mount fetches at most 1.05x what it serves and has measured the link (its
    in-flight target, bandwidth x latency, is between 16 KB and 10 MB)."""
    why = remote_servers.missing_http_server() or remote_servers.missing_netns()
    if why:
        pytest.skip(why)
    store = Store(remote_store)
    rels = sorted(store.files)
    name = os.path.basename(remote_store)
    with remote_servers.netns_link(rate_mbit=100) as ns, \
            remote_servers.http_server(os.path.dirname(remote_store), netns=ns) as srv, \
            remote_servers.fault_proxy(srv.host, srv.port, netns=ns) as proxy:
        proxy.set("none", latency_ms=20)
        url = f"{proxy.url}/{name}"
        with mounted(url, str(tmp_path / "random"), "-o", "scan_group=6") as mnt:
            got = read_all(mnt, rels[::-1])
            assert [r for r in rels if got[r] != store.read(r, 6)] == []
        with mounted(url, str(tmp_path / "order")) as mnt:
            order = read_order(mnt, "epoch-0")
            s = stats(mnt)
            assert s["prefetch_following"] and s["eio_errors"] == 0
            assert s["storage_bytes"] <= 1.05 * s["bytes_served"], s
            assert 16e3 <= s["storage_in_flight_target"] <= 10e6, s
            for rel in order[:20]:
                with open(os.path.join(mnt, rel), "rb") as f:
                    assert f.read() == store.read(rel)


def read_order(mnt, name):
    with open(os.path.join(mnt, ".fidelity", "order", name)) as f:
        rels = [line for line in f.read().split("\n") if line]
    for rel in rels:
        with open(os.path.join(mnt, rel), "rb") as f:
            f.read()
    return rels


def test_disk_cache_kept_across_remount(nginx, remote_store, cache_home, tmp_path):
    """Record prefixes fetched in published order go to the disk cache; a second mount reading
    the same order fetches no record bytes from the server."""
    name = os.path.basename(remote_store)
    cache = str(tmp_path / "dc")
    url = f"{nginx.url}/{name}"
    opts = ("-o", f"disk_cache={cache},disk_cache_size=1GiB,scan_group=5")
    with mounted(url, str(tmp_path / "a"), *opts) as mnt:
        read_order(mnt, "epoch-0")
        first = stats(mnt)
    assert first["storage_bytes"] > 0
    with mounted(url, str(tmp_path / "b"), *opts) as mnt:
        read_order(mnt, "epoch-0")
        second = stats(mnt)
        # Every disk cache counter in stats is a metric too, with the same value (between two
        # reads of stats: copies may still be written behind the reads).
        with open(os.path.join(mnt, ".fidelity", "metrics")) as f:
            metrics = f.read()
        after = stats(mnt)
        names = {"hits": "hits_total", "partial_hits": "partial_hits_total", "misses": "misses_total",
                 "bytes_from_disk": "read_bytes_total", "bytes_written": "written_bytes_total",
                 "not_kept": "not_kept_total", "evictions": "evictions_total", "dropped": "dropped_total",
                 "errors": "errors_total", "used": "bytes", "max": "max_bytes"}
        assert set(second["disk_cache"]) == set(names)
        for key, metric in names.items():
            lines = [l for l in metrics.splitlines() if l.startswith(f"fidelityfs_disk_cache_{metric}{{")]
            assert len(lines) == 1, (key, lines)
            assert second["disk_cache"][key] <= float(lines[0].rsplit(" ", 1)[1]) <= after["disk_cache"][key], key
        store = Store(remote_store)
        for rel in sorted(store.files)[:20]:
            with open(os.path.join(mnt, rel), "rb") as f:
                assert f.read() == store.read(rel, 5)
    assert second["storage_bytes"] == 0, second
    assert second["disk_cache"]["hits"] > 0


def test_four_ranks_read_the_store_once(nginx, remote_store, cache_home, tmp_path):
    """Four mounts acting as four nodes read ranks 0-3 of 4 in published order: the record
    prefixes they load together are at most 1.05x the store's record bytes, and their shares are
    disjoint and complete. Before a mount's order detector follows (its first kFollowScore = 8
    reads) files are read as their own pieces: at most 9 files' bytes per rank on top."""
    name = os.path.basename(remote_store)
    url = f"{nginx.url}/{name}"
    store = Store(remote_store)
    total_records = sum(size for _, _, size in store.records.values())
    largest = max(len(store.read(rel)) for rel in store.files)
    prefixes, pieces, seen = 0, 0, []
    for rank in range(4):
        with mounted(url, str(tmp_path / f"r{rank}")) as mnt:
            seen.append(read_order(mnt, f"epoch-1.rank-{rank}-of-4"))
            s = stats(mnt)
            prefixes += s["record_bytes"]
            pieces += s["storage_bytes"] - s["record_bytes"]
            assert s["prefetch_following"]
    assert set().union(*map(set, seen)) == set(store.files)
    assert len({len(s) for s in seen}) == 1  # equal lengths, as DistributedSampler expects
    assert prefixes <= 1.05 * total_records, (prefixes, total_records)
    assert pieces <= 4 * 9 * largest, (pieces, largest)


def shuffled(rels, seed):
    import random
    out = list(rels)
    random.Random(seed).shuffle(out)
    return out


def test_records_mode_over_s3_and_http(s3_url, nginx, remote_store, cache_home, tmp_path):
    """random_reads=records over RGW and nginx, random order, 8 readers: every file right, one GET
    a record (records of 512 KiB are one part each), no piece reads."""
    store = Store(remote_store)
    rels = shuffled(store.files, 11)
    name = os.path.basename(remote_store)
    for url in (s3_url, f"{nginx.url}/{name}"):
        mnt = str(tmp_path / url.split(":")[0])
        with mounted(url, mnt, "-o", "random_reads=records,threads=8"):
            got, eio = read_concurrently(mnt, rels, 8)
            assert eio == [] and [r for r in rels if got[r] != store.read(r)] == []
            s = stats(mnt)
        nrec = len({store.files[r]["record"] for r in rels})
        assert s["piece_reads"] == 0 and s["records_read"] == nrec, s
        assert s["storage_reads"] == nrec and s["storage_retries"] == 0, s
        assert s["storage_bytes"] == sum(size for _, _, size in store.records.values()), s


@pytest.mark.parametrize("cache", ["256MiB", "1MiB"])
def test_random_epochs_with_a_disk_cache_fetch_the_store_once(nginx, remote_store, cache_home, tmp_path, cache):
    """random_reads=auto with a disk cache larger than the store: a random epoch loads records
    (their copies go to the disk cache), and a remount reading another random order fetches no
    byte from the server. With a memory cache smaller than the store (1MiB), files of records
    already on local disk are read piece by piece from their copies."""
    store = Store(remote_store)
    name = os.path.basename(remote_store)
    url = f"{nginx.url}/{name}"
    dc = str(tmp_path / "dc")
    opts = ("-o", f"disk_cache={dc},disk_cache_size=1GiB,cache={cache},threads=8")
    record_bytes = sum(size for _, _, size in store.records.values())
    with mounted(url, str(tmp_path / "e0"), *opts) as mnt:
        rr = stats(mnt)["random_reads"]
        assert rr["mode"] == "records" and rr["budget_of"] == "disk_cache_size", rr
        rels = shuffled(store.files, 1)
        got, eio = read_concurrently(mnt, rels, 8)
        assert eio == [] and [r for r in rels if got[r] != store.read(r)] == []
        first = stats(mnt)
    assert first["storage_bytes"] >= record_bytes
    if cache == "256MiB":  # memory holds every record: each fetched once, whole
        assert first["piece_reads"] == 0 and first["storage_bytes"] == record_bytes, first
    with mounted(url, str(tmp_path / "e1"), *opts) as mnt:
        rels = shuffled(store.files, 2)
        got, eio = read_concurrently(mnt, rels, 8)
        assert eio == [] and [r for r in rels if got[r] != store.read(r)] == []
        second = stats(mnt)
    assert second["storage_bytes"] == 0 and second["storage_reads"] == 0, second
    assert second["disk_cache"]["bytes_from_disk"] > 0
    if cache == "1MiB":
        assert second["random_reads"]["local_copy_reads"] > 0


def test_a_disk_cache_smaller_than_the_store_keeps_pieces(nginx, remote_store, cache_home, tmp_path):
    """auto with disk_cache_size below what the store needs: pieces, as the log line says."""
    store = Store(remote_store)
    name = os.path.basename(remote_store)
    dc = str(tmp_path / "dc")
    with mounted(f"{nginx.url}/{name}", str(tmp_path / "m"), "-o", f"disk_cache={dc},disk_cache_size=64KiB") as mnt:
        rr = stats(mnt)["random_reads"]
        assert rr["mode"] == "pieces" and rr["budget"] == 64 << 10 and rr["needed"] > rr["budget"], rr
        assert "disk_cache_size holds only 65536 B" in rr["why"]
        rels = shuffled(store.files, 3)[:40]
        got, eio = read_concurrently(mnt, rels, 4)
        assert eio == [] and [r for r in rels if got[r] != store.read(r)] == []
        s = stats(mnt)
    assert s["records_read"] == 0 and s["piece_reads"] > 0


@pytest.mark.parametrize("fault", [
    dict(mode="reset", p=0.3),
    dict(mode="status", code=503, count=30),
    dict(mode="stall", seconds=30, count=2),
])
def test_faults_during_record_loads_with_waiters(fault, nginx, remote_store, cache_home, tmp_path):
    """Faults while records load for random readers, 8 of them at once in the files of few records
    (so most wait for another's load): every reader gets the right bytes (after retries; a stalled
    body is re-issued after the 5 s stall timeout, well before the stall ends), none hangs, the
    daemon stays up."""
    store = Store(remote_store)
    by_record = {}
    for rel, f in store.files.items():
        by_record.setdefault(f["record"], []).append(rel)
    rels = shuffled([r for rec in sorted(by_record)[:4] for r in by_record[rec]], 5)
    name = os.path.basename(remote_store)
    with remote_servers.fault_proxy(nginx.host, nginx.port, seed=3) as proxy:
        mnt = str(tmp_path / "m")
        with mounted(f"{proxy.url}/{name}", mnt, "-o", "random_reads=records,threads=8"):
            pid = daemon_pid(mnt)
            proxy.set(**fault)
            got, eio = read_concurrently(mnt, rels, 8, seconds=60)
            proxy.set(mode="none")
            assert eio == []
            assert [r for r in rels if got[r] != store.read(r)] == []
            assert daemon_pid(mnt) == pid
            s = stats(mnt)
            assert proxy.stats()["faults"] > 0 and s["storage_retries"] > 0
            # each record loaded once (a load that failed after its retries leaves its readers to
            # fetch their pieces, which retry again)
            assert s["records_read"] <= 4, s
