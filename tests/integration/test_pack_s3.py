"""`fidelityfs pack SRC s3://BUCKET/PREFIX` against a real Ceph RADOS Gateway: the store written
to S3 mounts and gives the bytes of a local pack of the same source and seed (a record above the
multipart threshold included), a re-run replaces it, bad credentials or buckets fail before any
packing, and a pack that fails or is stopped mid-way leaves no store that mounts (nor multipart
uploads). Faults come from the fault proxy in front of RGW. `fidelityfs merge` of parts packed
to S3 copies their records on the server into a store that gives the bytes of a single pack, and
refuses missing parts and parts that are not stores, leaving no store that mounts. `pack --append`
to S3 uploads only the new records and the index (If-Match on the ETag it started from), and a
killed or overtaken append leaves the store as it was."""
import collections
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

import pytest

import remote_servers
from conftest import fid_bin, pack, run, wait_stopped
from fidstore import Store
from mountutil import mount, mounted, read_all, unmount, walk_files

BUCKET = "fid-pack"
SECRET_MARK = "s3cr3t-never-printed"
BIG = 21 << 20  # a blob whose record is above the 16 MiB multipart threshold: 3 parts of 8 MiB


@pytest.fixture(scope="module")
def rgw(tmp_path_factory):
    why = remote_servers.missing_s3_server()
    if why:
        pytest.skip(why)
    with remote_servers.s3_server(str(tmp_path_factory.mktemp("rgw") / "s3")) as env:
        aws(env, "s3", "mb", f"s3://{BUCKET}")
        yield env


def aws(env, *args, check=True):
    p = subprocess.run(["aws", "--endpoint-url", env["AWS_ENDPOINT_URL"], *args], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} -> {p.returncode}: {p.stderr}")
    return p


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """TMPDIR of the packs: where the stores are built before they go up."""
    return str(tmp_path_factory.mktemp("scratch"))


def pack_s3(env, scratch, src, url, *extra, endpoint=None, check=True):
    run_env = {**os.environ, **env, "TMPDIR": scratch}
    if endpoint:
        run_env["AWS_ENDPOINT_URL"] = endpoint
    return run("pack", src, url, "--progress", "off", *extra, check=check, env=run_env, timeout=300)


def mount_s3(env, url, mnt, check=True):
    return mount(url, mnt, check=check, env={**os.environ, **env})


@pytest.fixture(scope="module")
def tree(imagenet_tree, tmp_path_factory):
    """The ImageNet-like tree plus a large random blob (its own multipart record)."""
    out = str(tmp_path_factory.mktemp("src") / "tree")
    shutil.copytree(imagenet_tree, out)
    with open(os.path.join(out, "big.bin"), "wb") as f:
        f.write(random.Random(7).randbytes(BIG))
    return out


def objects(env, prefix):
    p = aws(env, "s3api", "list-objects-v2", "--bucket", BUCKET, "--prefix", prefix + "/", "--output", "text",
            "--query", "Contents[].[Key,Size,ETag]")
    rows = [line.split("\t") for line in p.stdout.splitlines() if line.strip() and line.strip() != "None"]
    return {key[len(prefix) + 1:]: (int(size), etag) for key, size, etag in rows}


def multipart_uploads(env, prefix):
    p = aws(env, "s3api", "list-multipart-uploads", "--bucket", BUCKET, "--prefix", prefix + "/", "--output", "text",
            "--query", "Uploads[].Key")
    return [k for k in p.stdout.split() if k != "None"]


def expect_store_matches(env, url, local, tmp_path):
    store = Store(local)
    rels = sorted(store.files)
    with mounted(url, str(tmp_path / "m"), env={**os.environ, **env}) as mnt:
        assert sorted(walk_files(mnt)) == rels
        got = read_all(mnt, rels)
    assert [r for r in rels if got[r] != store.read(r)] == []


def test_pack_to_s3_mounts_with_the_bytes_of_a_local_pack(rgw, scratch, tree, tmp_path):
    url, prefix = f"s3://{BUCKET}/sets/one", "sets/one"
    p = pack_s3(rgw, scratch, tree, url, "--seed", "5", "--record-bytes", "1MiB")
    assert "packed" in p.stdout
    local = pack(tree, str(tmp_path / "local"), "--seed", "5", "--record-bytes", "1MiB")
    # The same objects as the local store's files, byte for byte.
    stored = objects(rgw, prefix)
    want = {os.path.relpath(os.path.join(d, f), local): os.path.getsize(os.path.join(d, f))
            for d, _, fs in os.walk(local) for f in fs}
    assert {k: v[0] for k, v in stored.items()} == want
    big_record = max(stored, key=lambda k: stored[k][0])
    assert stored[big_record][0] > BIG and "-3" in stored[big_record][1]  # went up in 3 parts
    got = tmp_path / "got"
    aws(rgw, "s3", "cp", "--recursive", "--only-show-errors", f"{url}/records", str(got))
    for name in os.listdir(got):
        with open(got / name, "rb") as a, open(os.path.join(local, "records", name), "rb") as b:
            assert a.read() == b.read(), name
    assert multipart_uploads(rgw, prefix) == []
    assert os.listdir(scratch) == []  # the records went up and their local files with them
    expect_store_matches(rgw, url, local, tmp_path)


def test_a_rerun_replaces_the_store(rgw, scratch, tree, imagenet_tree, tmp_path):
    url, prefix = f"s3://{BUCKET}/sets/again", "sets/again"
    pack_s3(rgw, scratch, tree, url, "--record-bytes", "1MiB")
    before = objects(rgw, prefix)
    # A smaller store onto the same prefix: it mounts with its own files only. Records past its
    # count stay as orphans (nothing lists the prefix), unread.
    small = str(tmp_path / "small")
    shutil.copytree(imagenet_tree, small)
    for d in sorted(os.listdir(small))[1:]:
        if os.path.isdir(os.path.join(small, d)):
            shutil.rmtree(os.path.join(small, d))
    pack_s3(rgw, scratch, small, url, "--record-bytes", "1MiB")
    local = pack(small, str(tmp_path / "local"), "--record-bytes", "1MiB")
    expect_store_matches(rgw, url, local, tmp_path)
    after = objects(rgw, prefix)
    assert set(after) == set(before)
    assert after["index.sqlite"][0] == os.path.getsize(os.path.join(local, "index.sqlite"))


def test_bad_credentials_buckets_and_endpoints_fail_before_packing(rgw, scratch, imagenet_tree):
    url = f"s3://{BUCKET}/sets/denied"
    p = pack_s3({**rgw, "AWS_SECRET_ACCESS_KEY": SECRET_MARK}, scratch, imagenet_tree, url, check=False)
    assert p.returncode == 1, p.stderr
    assert url in p.stderr and "denied" in p.stderr and "environment" in p.stderr
    assert SECRET_MARK not in p.stdout + p.stderr and "packed" not in p.stdout
    p = pack_s3(rgw, scratch, imagenet_tree, "s3://fid-no-such-bucket/x", check=False)
    assert p.returncode == 1 and "fid-no-such-bucket" in p.stderr and "NoSuchBucket" in p.stderr
    p = pack_s3(rgw, scratch, imagenet_tree, url, endpoint="http://127.0.0.1:9", check=False)
    assert p.returncode == 1 and url in p.stderr and "127.0.0.1:9" in p.stderr
    assert objects(rgw, "sets/denied") == {}
    p = run("pack", imagenet_tree, "https://example.com/store", check=False)
    assert p.returncode == 2 and "s3://" in p.stderr


def test_a_source_that_cannot_be_listed_leaves_the_store_at_the_target(rgw, scratch, imagenet_tree, tmp_path):
    """The source is listed before the target is touched: a store already there keeps mounting."""
    url, prefix = f"s3://{BUCKET}/sets/kept", "sets/kept"
    pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB")
    before = objects(rgw, prefix)
    assert "index.sqlite" in before
    bad_tar = tmp_path / "bad.tar"
    bad_tar.write_bytes(random.Random(3).randbytes(64 << 10))
    for src, says in ((f"s3://{BUCKET}/sets/nothing-here", "no objects under"),
                      ("s3://fid-no-such-bucket/x", "fid-no-such-bucket"), (str(bad_tar), "bad.tar")):
        p = pack_s3(rgw, scratch, src, url, "--record-bytes", "1MiB", check=False)
        assert p.returncode == 1 and says in p.stderr and "packed" not in p.stdout, p.stderr
        assert objects(rgw, prefix) == before  # index.sqlite's ETag (its MD5) too: the same bytes
    assert os.listdir(scratch) == []
    expect_store_matches(rgw, url, pack(imagenet_tree, str(tmp_path / "local"), "--record-bytes", "1MiB"), tmp_path)


@pytest.fixture
def proxy(rgw):
    upstream = rgw["AWS_ENDPOINT_URL"].rsplit(":", 1)
    with remote_servers.fault_proxy(upstream[0].split("//")[1], int(upstream[1])) as proxy:
        yield proxy


def test_retried_puts_still_give_the_exact_bytes(rgw, scratch, tree, proxy, tmp_path):
    """503s on parts and on single PUTs: each is sent again, its body read again from the start."""
    url = f"s3://{BUCKET}/sets/retried"
    proxy.set("status", code=503, count=4, match="records/")
    pack_s3(rgw, scratch, tree, url, "--seed", "5", "--record-bytes", "1MiB", endpoint=proxy.url)
    assert proxy.stats()["faults"] == 4
    local = pack(tree, str(tmp_path / "local"), "--seed", "5", "--record-bytes", "1MiB")
    expect_store_matches(rgw, url, local, tmp_path)


def test_a_failed_upload_leaves_no_store_that_mounts(rgw, scratch, tree, imagenet_tree, proxy, tmp_path):
    url = f"s3://{BUCKET}/sets/failed"
    pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB")  # a store there to replace
    # A part of the big record refused: the pack fails naming it, its multipart upload is aborted.
    proxy.set("status", code=403, count=1, match="partNumber=2")
    p = pack_s3(rgw, scratch, tree, url, "--record-bytes", "1MiB", endpoint=proxy.url, check=False)
    assert p.returncode == 1 and url in p.stderr and "records/" in p.stderr and "403" in p.stderr, p.stderr
    assert "index.sqlite" not in objects(rgw, "sets/failed")
    assert multipart_uploads(rgw, "sets/failed") == []
    mnt = str(tmp_path / "m")
    assert mount_s3(rgw, url, mnt, check=False).returncode != 0
    unmount(mnt)
    # A single PUT refused.
    proxy.set("status", code=403, count=1, match="records/000001.rec")
    p = pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB", endpoint=proxy.url, check=False)
    assert p.returncode == 1 and "records/000001.rec" in p.stderr, p.stderr
    assert "index.sqlite" not in objects(rgw, "sets/failed")


@pytest.mark.parametrize("lost", [1, 100], ids=["once", "every-retry"])
def test_a_lost_complete_answer_keeps_the_completed_object(rgw, scratch, tree, proxy, tmp_path, lost):
    """RGW completes the multipart upload but its answer never arrives. Once: RGW answers the
    client's retry of Complete as done. Every retry: the client gives up, then a HEAD shows the
    object with these parts' size and ETag, and the pack goes on."""
    url, prefix = f"s3://{BUCKET}/sets/lost-{lost}", f"sets/lost-{lost}"
    proxy.set("reset", at="response", method="POST", match="uploadId=", count=lost)
    p = pack_s3(rgw, scratch, tree, url, "--seed", "5", "--record-bytes", "1MiB", endpoint=proxy.url, check=False)
    assert p.returncode == 0, p.stderr
    faults = proxy.stats()["faults"]
    assert (faults == 1) if lost == 1 else (faults >= 8)  # every attempt of the client (curl may add some)
    stored = objects(rgw, prefix)
    big_record = max(stored, key=lambda k: stored[k][0])
    assert stored[big_record][0] > BIG and stored[big_record][1].endswith('-3"')
    assert multipart_uploads(rgw, prefix) == []
    expect_store_matches(rgw, url, pack(tree, str(tmp_path / "local"), "--seed", "5", "--record-bytes", "1MiB"),
                         tmp_path)


def test_a_complete_that_never_arrives_fails_naming_the_object(rgw, scratch, tree, proxy, tmp_path):
    url, prefix = f"s3://{BUCKET}/sets/never-completed", "sets/never-completed"
    proxy.set("reset", at="request", method="POST", match="uploadId=")
    p = pack_s3(rgw, scratch, tree, url, "--record-bytes", "1MiB", endpoint=proxy.url, check=False)
    assert p.returncode == 1, p.stderr
    assert url in p.stderr and "records/" in p.stderr and "CompleteMultipartUpload failed" in p.stderr, p.stderr
    assert "there is no such object" in p.stderr, p.stderr
    assert "index.sqlite" not in objects(rgw, prefix)
    assert multipart_uploads(rgw, prefix) == []  # aborted (its DELETE is not faulted)
    mnt = str(tmp_path / "m")
    assert mount_s3(rgw, url, mnt, check=False).returncode != 0
    unmount(mnt)


def wait_for_fault(proxy, seconds=60):
    assert proxy.wait_fault(seconds), "the pack never reached the delayed upload"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_an_interrupted_pack_leaves_no_store_that_mounts(rgw, scratch, tree, imagenet_tree, proxy, tmp_path, sig):
    url = f"s3://{BUCKET}/sets/stopped-{sig.name}"
    pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB")
    # A part of the big record held at the proxy: the pack is mid-way when the signal comes.
    proxy.set("delay", ms=60000, match="partNumber=2")
    env = {**os.environ, **rgw, "TMPDIR": scratch, "AWS_ENDPOINT_URL": proxy.url}
    proc = subprocess.Popen([fid_bin(), "pack", tree, url, "--progress", "off", "--record-bytes", "1MiB"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_fault(proxy)
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode != 0
        if sig == signal.SIGINT:
            assert time.monotonic() - t0 < 10 and "interrupted" in err, err
            assert multipart_uploads(rgw, f"sets/stopped-{sig.name}") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proxy.set("none")
    assert "index.sqlite" not in objects(rgw, f"sets/stopped-{sig.name}")
    mnt = str(tmp_path / "m")
    assert mount_s3(rgw, url, mnt, check=False).returncode != 0
    unmount(mnt)
    # The next pack to the URL clears what a killed one left in the scratch folder.
    pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB")
    assert os.listdir(scratch) == []
    expect_store_matches(rgw, url, pack(imagenet_tree, str(tmp_path / "local"), "--record-bytes", "1MiB"), tmp_path)


def merge_s3(env, scratch, *urls, check=True):
    return run("merge", *urls, check=check, env={**os.environ, **env, "TMPDIR": scratch}, timeout=300)


def record_digests(env, url, tmp_path):
    """Counter of the sha256 of the records under url/records, downloaded."""
    got = tmp_path / url.rsplit("/", 1)[1]
    aws(env, "s3", "cp", "--recursive", "--only-show-errors", f"{url}/records", str(got))
    out = collections.Counter()
    for name in os.listdir(got):
        with open(got / name, "rb") as f:
            out[hashlib.sha256(f.read()).hexdigest()] += 1
    return out


@pytest.fixture(scope="module")
def shards(rgw, scratch, tree):
    """The tree packed as 2 parts straight to S3, seed 3."""
    urls = [f"s3://{BUCKET}/merge/p{i}" for i in range(2)]
    for i, url in enumerate(urls):
        pack_s3(rgw, scratch, tree, url, "--shard", f"{i}/2", "--seed", "3", "--record-bytes", "1MiB")
    return urls


def test_merge_on_s3_copies_the_records_on_the_server(rgw, scratch, tree, shards, tmp_path):
    url = f"s3://{BUCKET}/merge/all"
    p = merge_s3(rgw, scratch, *shards, url)
    assert "merged 2 parts" in p.stdout
    # The files of a single pack with the same seed, byte for byte.
    local = pack(tree, str(tmp_path / "local"), "--seed", "3", "--record-bytes", "1MiB")
    expect_store_matches(rgw, url, local, tmp_path)
    # Its records are objects of its own under merge/all/records: the parts' records, copied.
    merged = objects(rgw, "merge/all")
    parts = [objects(rgw, f"merge/p{i}") for i in range(2)]
    records = sorted(k for k in merged if k.startswith("records/"))
    assert len(records) == sum(1 for part in parts for k in part if k.startswith("records/")) and set(merged) == {
        "index.sqlite", *records}
    want = record_digests(rgw, shards[0], tmp_path) + record_digests(rgw, shards[1], tmp_path)
    assert record_digests(rgw, url, tmp_path) == want
    assert multipart_uploads(rgw, "merge/all") == []
    assert os.listdir(scratch) == []  # the parts' indexes and the merged one, gone


def test_merge_on_s3_refuses_missing_parts_and_non_stores(rgw, scratch, shards, tmp_path):
    url = f"s3://{BUCKET}/merge/refused"
    p = merge_s3(rgw, scratch, shards[0], url, check=False)
    assert p.returncode == 1 and "shard 1 of 2 missing" in p.stderr and shards[0] in p.stderr, p.stderr
    assert "index.sqlite" not in objects(rgw, "merge/refused")
    mnt = str(tmp_path / "m")
    assert mount_s3(rgw, url, mnt, check=False).returncode != 0
    unmount(mnt)
    nothing = f"s3://{BUCKET}/merge/nothing"
    p = merge_s3(rgw, scratch, nothing, shards[1], url, check=False)
    assert p.returncode == 1 and nothing in p.stderr and "not a fidelityfs store" in p.stderr, p.stderr
    assert objects(rgw, "merge/refused") == {} and os.listdir(scratch) == []


def test_a_refused_merge_leaves_the_store_at_its_target(rgw, scratch, shards, tmp_path):
    """The parts are checked before the target is touched: a store already there keeps mounting."""
    url = f"s3://{BUCKET}/merge/kept"
    merge_s3(rgw, scratch, *shards, url)
    before = objects(rgw, "merge/kept")
    p = merge_s3(rgw, scratch, shards[0], url, check=False)
    assert p.returncode == 1 and "shard 1 of 2 missing" in p.stderr, p.stderr
    assert objects(rgw, "merge/kept") == before and "index.sqlite" in before
    mnt = str(tmp_path / "m")
    try:
        mount_s3(rgw, url, mnt)
        assert len(os.listdir(mnt)) > 0
    finally:
        unmount(mnt)


def test_merge_arguments_all_local_or_all_s3(tmp_path):
    for args in ([f"s3://{BUCKET}/merge/p0", str(tmp_path / "p1"), f"s3://{BUCKET}/x"],
                 [str(tmp_path / "p0"), str(tmp_path / "p1"), f"s3://{BUCKET}/x"]):
        p = run("merge", *args, check=False)
        assert p.returncode == 2 and "all local folders or all s3://" in p.stderr, p.stderr
    p = run("merge", "http://127.0.0.1:9/p0", "http://127.0.0.1:9/p1", "http://127.0.0.1:9/x", check=False)
    assert p.returncode == 2 and "http://127.0.0.1:9/p0" in p.stderr, p.stderr
    p = run("merge", f"s3://{BUCKET}/merge/p0", f"s3://{BUCKET}/merge/p1", f"s3://{BUCKET}/merge/p1", check=False)
    assert p.returncode == 2 and "cannot be one of its parts" in p.stderr, p.stderr


def test_a_failed_copy_leaves_no_store_that_mounts(rgw, scratch, shards, proxy, tmp_path):
    url = f"s3://{BUCKET}/merge/faulted"
    proxy.set("status", code=403, count=1, match="merge/faulted/records/000002.rec")
    p = run("merge", *shards, url, check=False, timeout=300,
            env={**os.environ, **rgw, "TMPDIR": scratch, "AWS_ENDPOINT_URL": proxy.url})
    assert p.returncode == 1 and "cannot copy s3://" in p.stderr and "to records/000002.rec" in p.stderr, p.stderr
    assert "403" in p.stderr, p.stderr
    # Only the parts' indexes came down: the records were copied without passing through.
    assert proxy.stats()["by_method"].get("GET", 0) == 2
    assert "index.sqlite" not in objects(rgw, "merge/faulted") and os.listdir(scratch) == []
    mnt = str(tmp_path / "m")
    assert mount_s3(rgw, url, mnt, check=False).returncode != 0
    unmount(mnt)


def test_a_second_pack_or_merge_to_the_same_store_is_refused(rgw, scratch, tree, imagenet_tree, shards, proxy,
                                                             tmp_path):
    """Runs to one URL share its scratch folder (and clear it, and the store, as they start): while
    one runs, another pack or merge there stops at once, and the first goes on unharmed."""
    url = f"s3://{BUCKET}/sets/busy"
    proxy.set("delay", ms=100, count=1, match="partNumber=2")  # marks when the first pack is mid-way
    env = {**os.environ, **rgw, "TMPDIR": scratch, "AWS_ENDPOINT_URL": proxy.url}
    first = subprocess.Popen([fid_bin(), "pack", tree, url, "--progress", "off", "--seed", "5", "--record-bytes",
                              "1MiB"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_fault(proxy)
        first.send_signal(signal.SIGSTOP)  # held there, its lock with it
        p = pack_s3(rgw, scratch, imagenet_tree, url, "--record-bytes", "1MiB", check=False)
        assert p.returncode == 1 and url in p.stderr and "another pack, merge, relayout or append to this store is running" in p.stderr, p.stderr
        p = merge_s3(rgw, scratch, *shards, url, check=False)
        assert p.returncode == 1 and url in p.stderr and "another pack, merge, relayout or append to this store is running" in p.stderr, p.stderr
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0 and "packed" in out, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert os.listdir(scratch) == []  # the lock file goes with the run
    expect_store_matches(rgw, url, pack(tree, str(tmp_path / "local"), "--seed", "5", "--record-bytes", "1MiB"),
                         tmp_path)
    merge_s3(rgw, scratch, *shards, url)  # free again


@pytest.fixture(scope="module")
def small_append_trees(append_trees, tmp_path_factory):
    """append_trees cut to one class and the new class (about a fifth): S3 tests verify often."""
    old, new, _ = append_trees
    root = tmp_path_factory.mktemp("small-append")
    cls = sorted(os.listdir(old))[0]
    shutil.copytree(old / cls, root / "old" / cls)
    for d in (cls, "zz_new"):
        shutil.copytree(new / d, root / "new" / d)
        shutil.copytree(root / "new" / d, root / "all" / d, dirs_exist_ok=True)
    shutil.copytree(old / cls, root / "all" / cls, dirs_exist_ok=True)
    return root / "old", root / "new", root / "all"


def append_s3(env, scratch, src, url, *extra, stop=None, check=True):
    """pack --append to url: the finished run, or with `stop` the process held at that phase."""
    run_env = {**os.environ, **env, "TMPDIR": scratch}
    cmd = [fid_bin(), "pack", "--append", str(src), url, "--progress", "off", *extra]
    if stop:
        proc = subprocess.Popen(cmd, env={**run_env, "FIDELITYFS_APPEND_STOP": stop}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        wait_stopped(proc)
        return proc
    p = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def leftover_lines(out):
    return [line for line in out.splitlines() if "interrupted append" in line]


def test_append_to_s3_uploads_only_new_records_and_a_mount_before_it_keeps_reading(rgw, scratch,
                                                                                   small_append_trees, tmp_path):
    old, new, both = small_append_trees
    url, prefix = f"s3://{BUCKET}/append/grow", "append/grow"
    pack_s3(rgw, scratch, old, url, "--record-bytes", "256KiB")
    before = objects(rgw, prefix)
    env = {**os.environ, **rgw}
    with mounted(url, str(tmp_path / "m_old"), "-o", "scan_group=4", env=env) as mnt_old:
        old_rels = walk_files(mnt_old)
        want_old = read_all(mnt_old, old_rels)
        held = append_s3(rgw, scratch, new, url, stop="between-records")
        try:
            assert read_all(mnt_old, old_rels) == want_old
        finally:
            held.send_signal(signal.SIGCONT)
            out, err = held.communicate(timeout=120)
        assert held.returncode == 0 and f"files {len(old_rels)} -> " in out, err
        assert read_all(mnt_old, old_rels) == want_old
        with mounted(url, str(tmp_path / "m_new"), "-o", "scan_group=4", env=env) as mnt:
            rels = walk_files(mnt)
            got = read_all(mnt, rels)
    after = objects(rgw, prefix)
    # The store's objects as they were, but its index; the new ones are records of this append.
    assert {k: v for k, v in after.items() if k in before and k != "index.sqlite"} == \
        {k: v for k, v in before.items() if k != "index.sqlite"}
    added = sorted(set(after) - set(before))
    assert added and all(re.fullmatch(r"records/[0-9]{6}-[0-9a-f]{8}-[0-9a-f]{16}\.rec", k) for k in added), added
    assert added[0].startswith(f"records/{len(before) - 1:06d}-"), added  # ids after the store's
    written = sum(after[k][0] for k in added) + after["index.sqlite"][0]
    assert f"wrote {written / 1e6:.1f} MB" in out, out
    assert os.listdir(scratch) == []

    fresh = pack(str(both), str(tmp_path / "fresh"), "--record-bytes", "256KiB")
    with mounted(fresh, str(tmp_path / "m_fresh"), "-o", "scan_group=4") as m:
        assert walk_files(m) == rels
        assert read_all(m, rels) == got  # old files as before, new ones as a fresh pack has them
    assert {r: got[r] for r in old_rels} == want_old
    v = run("verify", url, env={**os.environ, **rgw})
    assert f"verified {len(rels)} files, 0 bad" in v.stdout and not leftover_lines(v.stdout), v.stdout

    # --replace: a file takes another's bytes; its old ones stay in their record, unreferenced.
    upd = tmp_path / "upd"
    (upd / old_rels[0]).parent.mkdir(parents=True)
    shutil.copy(old / old_rels[1], upd / old_rels[0])
    p = append_s3(rgw, scratch, upd, url, "--replace")
    assert f"files {len(rels)} -> {len(rels)} (1 replaced)" in p.stdout, p.stdout
    with mounted(url, str(tmp_path / "m_replaced"), "-o", "scan_group=4", env=env) as mnt:
        assert read_all(mnt, rels) == {**got, old_rels[0]: got[old_rels[1]]}
    info = json.loads(run("inspect", "--json", url, env=env).stdout)
    assert info["unreferenced_bytes"] > 0 and info["format_version"] == 6, info
    assert f"verified {len(rels)} files, 0 bad" in run("verify", url, env=env).stdout


def test_leftovers_over_more_than_one_page_of_a_listing_are_named_and_deleted(rgw, scratch, small_append_trees,
                                                                              tmp_path):
    """1,100 records left by appends: more than one page of a listing (1,000 keys), a page larger
    than an ordinary answer. inspect names every one, and the next append deletes every one."""
    old, new, _ = small_append_trees
    url, prefix = f"s3://{BUCKET}/append/pages", "append/pages"
    pack_s3(rgw, scratch, old, url, "--record-bytes", "256KiB")
    left = tmp_path / "left" / "records"
    left.mkdir(parents=True)
    names = [f"records/{500 + i:06d}-00000000-{i:016x}.rec" for i in range(1100)]
    for n in names:
        (tmp_path / "left" / n).write_bytes(b"")
    aws(rgw, "s3", "cp", "--recursive", "--quiet", str(tmp_path / "left"), f"s3://{BUCKET}/{prefix}/")
    env = {**os.environ, **rgw}
    named = [line.rsplit(" ", 1)[1] for line in leftover_lines(run("inspect", url, env=env).stdout)]
    assert sorted(named) == names
    append_s3(rgw, scratch, new, url)
    assert not set(names) & set(objects(rgw, prefix))
    assert not leftover_lines(run("verify", url, env=env).stdout)


@pytest.mark.parametrize("phase", ["records", "between-records", "index", "index-upload"])
def test_a_killed_append_to_s3_leaves_the_store_as_it_was(rgw, scratch, small_append_trees, tmp_path, phase):
    """Killed with its records uploaded, between two of them, with the index made but not sent,
    and half-way through the index's upload: the store's index is the one before, it mounts and
    verifies, inspect names the records left, and the next append removes them."""
    old, new, _ = small_append_trees
    url, prefix = f"s3://{BUCKET}/append/killed-{phase}", f"append/killed-{phase}"
    pack_s3(rgw, scratch, old, url, "--record-bytes", "256KiB")
    before = objects(rgw, prefix)
    held = append_s3(rgw, scratch, new, url, stop=phase)
    held.kill()
    held.communicate()
    after = objects(rgw, prefix)
    assert after["index.sqlite"] == before["index.sqlite"]
    assert {k: after[k] for k in before} == before
    env = {**os.environ, **rgw}
    with mounted(url, str(tmp_path / "m"), env=env) as m:
        rels = walk_files(m)
    v = run("verify", url, env=env)
    assert f"verified {len(rels)} files, 0 bad" in v.stdout, v.stdout
    left = leftover_lines(v.stdout)
    assert sorted(line.rsplit(": ", 1)[1] for line in left) == sorted(k for k in after if k not in before)
    if phase != "between-records":
        assert len(left) >= 2, left
    assert leftover_lines(run("inspect", url, env=env).stdout) == left
    append_s3(rgw, scratch, new, url)
    v = run("verify", url, env=env)
    assert ", 0 bad" in v.stdout and not leftover_lines(v.stdout), v.stdout
    assert {line.rsplit(": ", 1)[1] for line in left}.isdisjoint(objects(rgw, prefix))


def test_an_append_overtaken_by_another_is_refused_and_leaves_no_trace(rgw, scratch, small_append_trees, tmp_path):
    """Two appends to one store: here the second stops at once (the scratch lock); from another
    machine (another TMPDIR) it runs, and the one that puts its index second finds it changed
    (If-Match: HTTP 412) and fails, the store being the other's. The winner has deleted the
    loser's records already (they were made for an index that is gone)."""
    old, new, _ = small_append_trees
    url, prefix = f"s3://{BUCKET}/append/race", "append/race"
    pack_s3(rgw, scratch, old, url, "--record-bytes", "256KiB")
    zz, rest = tmp_path / "zz", tmp_path / "rest"
    shutil.copytree(new / "zz_new", zz / "zz_new")
    shutil.copytree(new, rest, ignore=shutil.ignore_patterns("zz_new"))
    first = append_s3(rgw, scratch, rest, url, stop="index")
    try:
        p = append_s3(rgw, scratch, zz, url, check=False)
        assert p.returncode == 1 and "another pack, merge, relayout or append to this store is running" in p.stderr, \
            p.stderr
        other = str(tmp_path / "other-machine")
        os.mkdir(other)
        append_s3(rgw, other, zz, url)
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 1 and "the store's index changed while this append ran" in err, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    env = {**os.environ, **rgw}
    with mounted(url, str(tmp_path / "m"), env=env) as m:
        rels = walk_files(m)
    assert any(r.startswith("zz_new/") for r in rels) and len(rels) == len(walk_files(str(old))) + 3
    assert not leftover_lines(run("inspect", url, env=env).stdout)
    append_s3(rgw, scratch, rest, url)
    v = run("verify", url, env=env)
    assert f"verified {len(walk_files(str(old))) + len(walk_files(str(new)))} files, 0 bad" in v.stdout, v.stdout
    assert not leftover_lines(v.stdout), v.stdout
