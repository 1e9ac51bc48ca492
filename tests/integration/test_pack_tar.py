"""pack from tar files: one tar, a tar of tars, compressed tars and shards serve the bytes a pack of
the same folder serves; bad members are refused, naming the tar and the member, and leave no store."""
import glob
import io
import os
import sqlite3
import subprocess
import tarfile

import pytest

from conftest import pack, run
from mountutil import mounted, walk_files


def files_table(store):
    """(dir, name, kind, source size, pieces) of every file by id, and (record, slot) by id."""
    with sqlite3.connect(f"file:{os.path.join(store, 'index.sqlite')}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT dir, name, kind, source_size, pieces, record, slot FROM files ORDER BY id").fetchall()
        dirs = db.execute("SELECT id, parent, name FROM dirs ORDER BY id").fetchall()
    return [r[:5] for r in rows], [r[5:] for r in rows], dirs


def served(store, mnt, level):
    """Every file's bytes as a mount of `store` serves them at `level`."""
    with mounted(store, mnt, "-o", f"scan_group={level}"):
        return {rel: open(os.path.join(mnt, rel), "rb").read() for rel in walk_files(mnt)}


@pytest.fixture(scope="module")
def tars(imagenet_tree, tmp_path_factory):
    """The ImageNet-like tree as: one tar, a tar of class tars, .tar.gz, .tar.zst, and 3 shards."""
    d = tmp_path_factory.mktemp("tars")
    out = {}
    out["plain"] = str(d / "plain.tar")
    subprocess.run(["tar", "-cf", out["plain"], "-C", imagenet_tree, "."], check=True)
    inner = d / "inner"
    inner.mkdir()
    for cls in sorted(os.listdir(imagenet_tree)):
        if os.path.isdir(os.path.join(imagenet_tree, cls)):
            subprocess.run(["tar", "-cf", str(inner / f"{cls}.tar"), "-C", os.path.join(imagenet_tree, cls), "."], check=True)
    top = [n for n in os.listdir(imagenet_tree) if not os.path.isdir(os.path.join(imagenet_tree, n))]
    out["ilsvrc"] = str(d / "ilsvrc.tar")
    subprocess.run(["tar", "-cf", out["ilsvrc"], "-C", str(inner), "."], check=True)
    with tarfile.open(out["ilsvrc"], "a") as t:  # the tree's top-level files (MANIFEST.tsv) beside the class tars
        for n in top:
            t.add(os.path.join(imagenet_tree, n), arcname=n)
    out["gz"] = str(d / "tree.tar.gz")
    subprocess.run(["tar", "-czf", out["gz"], "-C", imagenet_tree, "."], check=True)
    out["zst"] = str(d / "tree.tar.zst")
    subprocess.run(["tar", "--zstd", "-cf", out["zst"], "-C", imagenet_tree, "."], check=True)
    files = sorted(os.path.relpath(p, imagenet_tree) for p in glob.glob(os.path.join(imagenet_tree, "**"), recursive=True)
                   if os.path.isfile(p))
    shards = d / "shards"
    shards.mkdir()
    for k in range(3):
        with tarfile.open(shards / f"shard-{k:04d}.tar", "w") as t:
            for rel in files[k::3]:
                t.add(os.path.join(imagenet_tree, rel), arcname=rel)
    out["shards"] = str(shards / "shard-*.tar")
    out["list"] = str(d / "shards.txt")
    with open(out["list"], "w") as f:
        f.write("".join(f"{p}\n" for p in sorted(glob.glob(out["shards"]))))
    return out


@pytest.fixture(scope="module")
def folder_store(imagenet_tree, tmp_path_factory):
    return pack(imagenet_tree, str(tmp_path_factory.mktemp("stores") / "folder"), "--record-bytes", "1MiB")


@pytest.mark.parametrize("kind", ["plain", "ilsvrc", "gz", "zst", "shards", "list"])
def test_tar_source_serves_the_folder_packs_bytes(kind, tars, folder_store, tmp_path):
    store = str(tmp_path / "store")
    extra = ["--expand-inner-tars"] if kind == "ilsvrc" else []
    if kind == "list":
        run("pack", "--source-list", tars["list"], store, "--progress", "off", "--record-bytes", "1MiB")
    else:
        pack(tars[kind], store, "--record-bytes", "1MiB", *extra)
    want_rows, want_places, want_dirs = files_table(folder_store)
    rows, places, dirs = files_table(store)
    assert dirs == want_dirs
    assert rows == want_rows  # same ids, names, kinds, piece sizes and checksums
    if kind in ("gz", "zst"):
        assert places != want_places  # tar order, not the seeded permutation
    else:
        assert places == want_places  # read at random: the same storage order as the folder's
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    for level in (2, "full"):
        got = served(store, mnt, level)
        want = served(folder_store, mnt, level)
        assert got.keys() == want.keys() and len(got) >= 300
        assert got == want, level


def member(name, data=b"", **kw):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    return info, io.BytesIO(data) if data else None


def write_tar(path, members, mode="w"):
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as t:
        for info, data in members:
            t.addfile(info, data)
    return path


JPEG_LIKE = b"not really an image " * 50


def bad_tars(d):
    cases = {}
    cases["absolute"] = (write_tar(d / "abs.tar", [member("/etc/x.jpg", JPEG_LIKE)]), "/etc/x.jpg")
    cases["dotdot"] = (write_tar(d / "dotdot.tar", [member("a/../../x.jpg", JPEG_LIKE)]), "a/../../x.jpg")
    cases["device"] = (write_tar(d / "dev.tar", [member("a/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)]),
                       "a/null")
    cases["fifo"] = (write_tar(d / "fifo.tar", [member("a/pipe", type=tarfile.FIFOTYPE)]), "a/pipe")
    cases["hardlink"] = (write_tar(d / "link.tar", [member("a/x.jpg", JPEG_LIKE),
                                                    member("a/y.jpg", type=tarfile.LNKTYPE, linkname="a/gone.jpg")]),
                         "a/gone.jpg")
    cases["duplicate"] = (write_tar(d / "dup.tar", [member("a/x.jpg", JPEG_LIKE), member("a/x.jpg", JPEG_LIKE)]),
                          "a/x.jpg")
    cases["file_and_folder"] = (write_tar(d / "both.tar", [member("a", JPEG_LIKE), member("a/x.jpg", JPEG_LIKE)]),
                                "'a'")
    whole = write_tar(d / "whole.tar", [member(f"a/{i}.bin", os.urandom(5000)) for i in range(4)])
    data = open(whole, "rb").read()
    with open(d / "truncated.tar", "wb") as f:
        f.write(data[: 512 + 1000])  # inside the first member's data
    cases["truncated"] = (str(d / "truncated.tar"), "a/0.bin")
    with open(d / "truncated_header.tar", "wb") as f:
        f.write(data[: 512 * 11 + 100])  # inside the second member's header: named after the first
    cases["truncated_header"] = (str(d / "truncated_header.tar"), "a/0.bin")
    gz = write_tar(d / "whole.tar.gz", [member(f"a/{i}.bin", os.urandom(50000)) for i in range(4)], mode="w:gz")
    data = open(gz, "rb").read()
    with open(d / "truncated.tar.gz", "wb") as f:
        f.write(data[: len(data) // 2])
    cases["truncated_gzip"] = (str(d / "truncated.tar.gz"), "truncated.tar.gz")
    with open(d / "noise.tar", "wb") as f:
        f.write(os.urandom(10000))
    cases["not_a_tar"] = (str(d / "noise.tar"), "noise.tar")
    return cases


@pytest.mark.parametrize("case", ["absolute", "dotdot", "device", "fifo", "hardlink", "duplicate", "file_and_folder",
                                  "truncated", "truncated_header", "truncated_gzip", "not_a_tar"])
def test_bad_tar_is_refused_and_leaves_no_store(case, tmp_path):
    tar, named = bad_tars(tmp_path)[case]
    store = tmp_path / "out" / "store"
    store.parent.mkdir()
    p = run("pack", tar, store, "--progress", "off", check=False)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert named in p.stderr and os.path.basename(tar) in p.stderr, p.stderr
    assert os.listdir(store.parent) == []  # neither the store nor a temporary folder


def test_duplicate_across_shards_names_both(tmp_path):
    a = write_tar(tmp_path / "s0.tar", [member("cls/x.jpg", JPEG_LIKE)])
    b = write_tar(tmp_path / "s1.tar", [member("cls/x.jpg", JPEG_LIKE + b"!")])
    store = tmp_path / "out" / "store"
    store.parent.mkdir()
    p = run("pack", a, b, store, "--progress", "off", check=False)
    assert p.returncode == 1
    assert "cls/x.jpg" in p.stderr and "s0.tar" in p.stderr and "s1.tar" in p.stderr, p.stderr
    assert os.listdir(store.parent) == []


def test_links_and_reserved_names(tmp_path):
    """A hard link serves its target's bytes; a symbolic link and the reserved root name are skipped
    with the reason; the folder a tar names only implicitly exists."""
    data = os.urandom(3000)
    tar = write_tar(tmp_path / "links.tar", [
        member("a/x.bin", data),
        member("a/y.bin", type=tarfile.LNKTYPE, linkname="a/x.bin"),
        member("a/s.bin", type=tarfile.SYMTYPE, linkname="x.bin"),
        member(".fidelity/z.bin", b"z"),
        member("./b/deep/./c.bin", b"c"),
    ])
    store = str(tmp_path / "store")
    p = run("pack", tar, store, "--progress", "off", check=False)
    assert p.returncode == 1 and "2 source entries were skipped" in p.stderr, p.stderr  # the store holds the rest
    assert "skipped: a/s.bin: a symbolic link" in p.stdout, p.stdout
    assert "skipped: .fidelity: name reserved" in p.stdout, p.stdout
    assert run("pack", tar, str(tmp_path / "accepted"), "--progress", "off", "--allow-skipped").returncode == 0
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    with mounted(store, mnt):
        assert sorted(walk_files(mnt)) == ["a/x.bin", "a/y.bin", "b/deep/c.bin"]
        assert open(os.path.join(mnt, "a/y.bin"), "rb").read() == data
        assert open(os.path.join(mnt, "b/deep/c.bin"), "rb").read() == b"c"


def test_source_errors_are_usage_errors(tmp_path):
    store = tmp_path / "store"
    p = run("pack", str(tmp_path / "none-*.tar"), store, "--progress", "off", check=False)
    assert p.returncode == 2 and "no file matches" in p.stderr, p.stderr
    (tmp_path / "notes.txt").write_text("x")
    p = run("pack", tmp_path / "notes.txt", store, "--progress", "off", check=False)
    assert p.returncode == 2 and "not a folder or a tar file" in p.stderr, p.stderr
    p = run("pack", tmp_path / "no-such-folder", store, "--progress", "off", check=False)
    assert p.returncode == 2 and f"{tmp_path / 'no-such-folder'}: no such file or folder" in p.stderr, p.stderr
    p = run("pack", "--source-list", tmp_path / "missing.txt", store, "--progress", "off", check=False)
    assert p.returncode == 2 and "missing.txt" in p.stderr, p.stderr
    assert not store.exists()
