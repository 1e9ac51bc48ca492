"""`pack s3://BUCKET/PREFIX STORE` and `pack http://HOST/PATH STORE` against real servers (Ceph
RGW, nginx with its JSON folder listing): a tree uploaded there packs into the very records a
local pack of the same tree with the same seed writes, and the index differs only in mtimes and
its creation time. Failures name what failed and leave no store: no objects under the prefix, a
wrong secret, no such bucket, an object the server refuses (a bucket policy), an object deleted
after it was listed (the fault proxy holds its GET while the test deletes it on the server)."""
import os
import shutil
import sqlite3
import subprocess

import pytest

import remote_servers
from remote_servers import aws
from conftest import fid_bin, pack, run

BUCKET = "fid-src"
SEED = "11"


@pytest.fixture(scope="module")
def rgw(tmp_path_factory):
    why = remote_servers.missing_s3_server() or (None if shutil.which("aws") else "the aws command is not installed")
    if why:
        pytest.skip(why)
    with remote_servers.s3_server(str(tmp_path_factory.mktemp("rgw") / "s3")) as env:
        aws(env, "s3", "mb", f"s3://{BUCKET}")
        yield env


def pack_env(env, **changes):
    return {**os.environ, **env, **changes}


def rows(index, query):
    with sqlite3.connect(index) as db:
        return db.execute(query).fetchall()


def same_store(remote, local):
    """The records byte for byte, and the index but for mtimes and the creation time."""
    names = sorted(os.listdir(os.path.join(local, "records")))
    assert sorted(os.listdir(os.path.join(remote, "records"))) == names
    for name in names:
        with open(os.path.join(remote, "records", name), "rb") as a, open(os.path.join(local, "records", name), "rb") as b:
            assert a.read() == b.read(), name
    a, b = os.path.join(remote, "index.sqlite"), os.path.join(local, "index.sqlite")
    for query in ("SELECT id, parent, name FROM dirs ORDER BY id",
                  "SELECT id, dir, name, kind, script, record, slot, width, height, source_size, pieces, note "
                  "FROM files ORDER BY id",
                  "SELECT * FROM records ORDER BY 1", "SELECT * FROM skipped ORDER BY 1",
                  "SELECT * FROM meta WHERE key != 'created_unix' ORDER BY key"):
        assert rows(a, query) == rows(b, query), query
    assert len(rows(a, "SELECT id FROM files")) > 20


@pytest.fixture(scope="module")
def local_store(edge_tree, tmp_path_factory):
    return pack(edge_tree, str(tmp_path_factory.mktemp("local") / "store"), "--seed", SEED)


def test_s3_source_packs_the_same_store_as_the_local_folder(rgw, edge_tree, local_store, tmp_path):
    aws(rgw, "s3", "sync", "--only-show-errors", edge_tree, f"s3://{BUCKET}/data/edge")
    # S3 has no empty folders: a folder marker stands for the tree's empty one.
    for d, subdirs, files in os.walk(edge_tree):
        if not subdirs and not files:
            key = "data/edge/" + os.path.relpath(d, edge_tree) + "/"
            aws(rgw, "s3api", "put-object", "--bucket", BUCKET, "--key", key)
    store = str(tmp_path / "store")
    p = run("pack", f"s3://{BUCKET}/data/edge", store, "--seed", SEED, "--progress", "off", env=pack_env(rgw))
    assert "packed" in p.stdout
    same_store(store, local_store)


def test_http_source_packs_the_same_store_as_the_local_folder(edge_tree, local_store, tmp_path):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    served = tmp_path / "www"
    served.mkdir()
    os.symlink(edge_tree, served / "edge")
    with remote_servers.http_server(str(served), json_index=True) as srv:
        store = str(tmp_path / "store")
        run("pack", f"{srv.url}/edge", store, "--seed", SEED, "--progress", "off")
        same_store(store, local_store)
        p = run("pack", f"{srv.url}/no-such-folder", str(tmp_path / "s2"), "--progress", "off", check=False)
        assert p.returncode == 1 and "no-such-folder" in p.stderr and "HTTP 404" in p.stderr
        assert not os.path.exists(tmp_path / "s2")


def test_s3_listing_of_several_pages(rgw, tmp_path):
    """More keys than one ListObjectsV2 page holds (1000): every page is read."""
    tree = tmp_path / "many"
    for folder in ("a", "b"):
        (tree / folder).mkdir(parents=True)
        for i in range(503):
            (tree / folder / f"f{i}.txt").write_text(f"{folder}{i}\n")
    aws(rgw, "s3", "sync", "--only-show-errors", str(tree), f"s3://{BUCKET}/many")
    remote, local = str(tmp_path / "remote"), str(tmp_path / "local")
    run("pack", f"s3://{BUCKET}/many", remote, "--seed", SEED, "--progress", "off", env=pack_env(rgw))
    pack(str(tree), local, "--seed", SEED)
    assert len(rows(os.path.join(remote, "index.sqlite"), "SELECT id FROM files")) == 1006
    same_store(remote, local)


def failed_pack(env, url, store):
    p = run("pack", url, store, "--progress", "off", env=env, check=False, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert not os.path.exists(store)
    return p.stderr


def test_s3_source_errors_name_what_failed(rgw, tmp_path):
    err = failed_pack(pack_env(rgw), f"s3://{BUCKET}/nothing/here", str(tmp_path / "s1"))
    assert f"no objects under s3://{BUCKET}/nothing/here" in err

    secret = "s3cr3t-never-printed"
    err = failed_pack(pack_env(rgw, AWS_SECRET_ACCESS_KEY=secret), f"s3://{BUCKET}/data/edge", str(tmp_path / "s2"))
    assert "access denied" in err and f"s3://{BUCKET}/data/edge" in err and "from environment" in err
    assert secret not in err

    err = failed_pack(pack_env(rgw), "s3://no-such-bucket-here/x", str(tmp_path / "s3"))
    assert "no bucket named 'no-such-bucket-here'" in err


def test_s3_object_the_server_refuses_fails_the_pack(rgw, edge_tree, tmp_path):
    """A bucket policy denies reading one listed object: the pack fails naming it."""
    bucket = "fid-denied"
    aws(rgw, "s3", "mb", f"s3://{bucket}")
    aws(rgw, "s3", "cp", "--recursive", "--only-show-errors", os.path.join(edge_tree, "jpeg"), f"s3://{bucket}/set")
    policy = ('{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:GetObject",'
              f'"Resource":"arn:aws:s3:::{bucket}/set/gray.jpg"}}]}}')
    aws(rgw, "s3api", "put-bucket-policy", "--bucket", bucket, "--policy", policy)
    err = failed_pack(pack_env(rgw), f"s3://{bucket}/set", str(tmp_path / "s"))
    assert f"s3://{bucket}/set/gray.jpg: access denied" in err and "403" in err


def vanishing_pack(env, proxy, url, store, delete):
    """Packs `url` through `proxy`, set to hold one object's GET for a few seconds; once it holds
    it (the listing is done), `delete` removes the object on the server. Returns stderr of the
    failed pack."""
    proc = subprocess.Popen([fid_bin(), "pack", url, store, "--progress", "off"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proxy.wait_fault(60) and proc.poll() is None, "the object's GET never came"
        delete()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert not os.path.exists(store)
    return err


def test_s3_object_deleted_after_listing_fails_the_pack(rgw, edge_tree, tmp_path):
    aws(rgw, "s3", "cp", "--recursive", "--only-show-errors", os.path.join(edge_tree, "png"), f"s3://{BUCKET}/vanish")
    endpoint = rgw["AWS_ENDPOINT_URL"].split("//")[1]
    host, port = endpoint.split(":")
    with remote_servers.fault_proxy(host, int(port)) as proxy:
        proxy.set("delay", ms=4000, count=1, match="/vanish/rgb.png")
        err = vanishing_pack(pack_env(rgw, AWS_ENDPOINT_URL=proxy.url), proxy, f"s3://{BUCKET}/vanish", str(tmp_path / "s"),
                             lambda: aws(rgw, "s3", "rm", "--only-show-errors", f"s3://{BUCKET}/vanish/rgb.png"))
    assert f"s3://{BUCKET}/vanish/rgb.png: gone since it was listed" in err and "404" in err


def test_http_object_deleted_after_listing_fails_the_pack(edge_tree, tmp_path):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    served = tmp_path / "www"
    shutil.copytree(os.path.join(edge_tree, "png"), served / "png")
    with remote_servers.http_server(str(served), json_index=True) as srv, \
            remote_servers.fault_proxy(srv.host, srv.port) as proxy:
        proxy.set("delay", ms=3000, count=1, match="/png/rgb.png")
        err = vanishing_pack(dict(os.environ), proxy, f"{proxy.url}/png", str(tmp_path / "s"),
                             lambda: os.remove(served / "png" / "rgb.png"))
    assert f"{proxy.url}/png/rgb.png: gone since it was listed" in err and "404" in err
