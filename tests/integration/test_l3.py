"""L3: lossless sources are packed as L3 and read back as decoded views (stored PNG by default,
PPM/PGM or NPY with raw_format) with the pixels, PIL mode and palette of the source."""
import io
import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import manifest, pack, run
from mountutil import mounted

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from make_tree import photo_like  # noqa: E402


def lossless_rows(tree):
    return [r["path"] for r in manifest(tree) if r["expectation"] == "lossless"]


def same_image(got, want):
    assert got.mode == want.mode
    assert np.array_equal(np.asarray(got), np.asarray(want))
    if want.mode == "P":
        assert got.getpalette() == want.getpalette()
        assert got.info.get("transparency") == want.info.get("transparency")


def test_edge_lossless_rows_served_as_source_pixels(edge_tree, edge_store, tmp_path):
    mnt = str(tmp_path / "mnt")
    rows = lossless_rows(edge_tree)
    assert rows
    with mounted(edge_store, mnt):
        # a view read in many requests is decoded once (the daemon's view cache)
        stats = lambda: json.load(open(os.path.join(mnt, ".fidelity", "stats")))["l3_views"]
        before = stats()["renders"]
        biggest = max(rows, key=lambda r: os.path.getsize(os.path.join(edge_tree, r)))
        with open(os.path.join(mnt, biggest), "rb", buffering=0) as f:
            while f.read(4096):
                pass
        assert stats()["renders"] == before + 1
        for rel in rows:
            p = os.path.join(mnt, rel)
            assert os.getxattr(p, "user.fidelity.kind") == b"l3", rel
            assert os.getxattr(p, "user.fidelity.format") == b"png", rel
            data = open(p, "rb").read()
            assert os.stat(p).st_size == len(data), rel
            assert int(os.getxattr(p, "user.fidelity.bytes")) == len(data), rel
            same_image(Image.open(io.BytesIO(data)), Image.open(os.path.join(edge_tree, rel)))
        # a 128 KiB-chunked read gives the same bytes as a whole read
        p = os.path.join(mnt, "png/noise.png")
        whole = open(p, "rb").read()
        with open(p, "rb", buffering=0) as f:
            chunks = b"".join(iter(lambda: f.read(128 << 10), b""))
        assert chunks == whole


def test_verify_decodes_l3(edge_store):
    p = run("verify", edge_store, "--progress", "off")
    assert " 0 bad" in p.stdout


@pytest.mark.parametrize("fmt", ["ppm", "npy"])
def test_raw_formats(edge_tree, edge_store, tmp_path, fmt):
    mnt = str(tmp_path / "mnt")
    with mounted(edge_store, mnt, "-o", f"raw_format={fmt},raw_names=ext"):
        for rel in lossless_rows(edge_tree):
            src = Image.open(os.path.join(edge_tree, rel))
            want = np.asarray(src.convert("L") if src.mode == "1" else src)
            channels = 1 if want.ndim == 2 else want.shape[2]
            if fmt == "ppm" and channels in (2, 4):
                ext = ".png"  # no PNM for gray+alpha / RGBA: falls back to PNG
            elif fmt == "ppm":
                ext = ".pgm" if channels == 1 else ".ppm"
            else:
                ext = ".npy"
            p = os.path.join(mnt, rel + ext)
            assert not os.path.exists(os.path.join(mnt, rel))  # raw_names=ext: only the new name
            assert os.path.basename(p) in os.listdir(os.path.dirname(p))
            data = open(p, "rb").read()
            assert os.stat(p).st_size == len(data), rel
            assert os.getxattr(p, "user.fidelity.format").decode() == ext[1:].replace("pgm", "ppm")
            got = np.load(io.BytesIO(data)) if ext == ".npy" else np.asarray(Image.open(io.BytesIO(data)))
            if ext == ".png" or src.mode != "1":
                assert np.array_equal(got, want if ext != ".png" else np.asarray(src)), rel
        # the published orders name the files as the mount does
        order = open(os.path.join(mnt, ".fidelity", "order", "epoch-0")).read().split("\n")
        assert "png/rgb.png" + (".npy" if fmt == "npy" else ".ppm") in order
        assert "png/rgb.png" not in order


def test_an_extended_name_the_folder_already_holds_is_not_given(tmp_path):
    """raw_names=ext: `p.png` beside a stored `p.png.ppm` (and a folder `q.png.ppm` beside `q.png`)
    keeps its stored name, so every name is listed once and each view can be reached."""
    src = tmp_path / "src"
    (src / "c" / "q.png.ppm").mkdir(parents=True)
    rng = np.random.default_rng(7)
    imgs = {name: Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)) for name in ("p.png", "p.png.ppm", "q.png")}
    imgs["p.png"].save(src / "c" / "p.png")
    imgs["p.png.ppm"].save(src / "c" / "p.png.ppm", format="PPM")
    imgs["q.png"].save(src / "c" / "q.png")
    (src / "c" / "q.png.ppm" / "x.bin").write_bytes(b"x")
    store = pack(str(src), str(tmp_path / "store"))
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt, "-o", "raw_format=ppm,raw_names=ext"):
        names = os.listdir(os.path.join(mnt, "c"))
        assert sorted(names) == ["p.png", "p.png.ppm.ppm", "q.png", "q.png.ppm"], names
        for name, source in (("p.png", "p.png"), ("p.png.ppm.ppm", "p.png.ppm"), ("q.png", "q.png")):
            got = Image.open(os.path.join(mnt, "c", name))
            assert got.format == "PPM" and np.array_equal(np.asarray(got), np.asarray(imgs[source])), name
        assert os.listdir(os.path.join(mnt, "c", "q.png.ppm")) == ["x.bin"]


def test_bad_raw_format_is_a_usage_error(edge_store, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = run("mount", edge_store, str(mnt), "-o", "raw_format=jpg", check=False)
    assert p.returncode == 2
    assert "raw_format" in p.stderr


def test_torchvision_imagefolder_on_png_store(tmp_path):
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("torchvision.datasets")
    transforms = pytest.importorskip("torchvision.transforms")
    import random
    rng = random.Random(3)
    src = tmp_path / "src"
    for c in range(3):
        (src / f"city{c:02d}").mkdir(parents=True)
        for i in range(4):
            photo_like(rng, 320 + 7 * i, 180 + 3 * c).save(src / f"city{c:02d}" / f"img{i}.png")
    store = pack(str(src), str(tmp_path / "store"))
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt):
        tf = transforms.ToTensor()
        a = datasets.ImageFolder(str(src), transform=tf)
        b = datasets.ImageFolder(mnt, transform=tf)
        assert a.classes == b.classes and len(a) == len(b) == 12
        for i in range(len(a)):
            ta, la = a[i]
            tb, lb = b[i]
            assert la == lb
            assert torch.equal(ta, tb)


@pytest.mark.parametrize("rel", ["png/palette.png", "png/rgba.png", "png/bilevel.png", "other/bmp_rgb.bmp"])
def test_cli_encode_decode(edge_tree, tmp_path, rel):
    src = Image.open(os.path.join(edge_tree, rel))
    l3 = tmp_path / "x.l3"
    run("l3", "encode", os.path.join(edge_tree, rel), l3)
    run("l3", "decode", l3, tmp_path / "x.png")
    same_image(Image.open(tmp_path / "x.png"), src)
    run("l3", "decode", l3, tmp_path / "x.npy")
    want = np.asarray(src.convert("L") if src.mode == "1" else src)
    assert np.array_equal(np.load(tmp_path / "x.npy"), want)
    run("l3", "decode", l3, tmp_path / "x.pam")
    assert open(tmp_path / "x.pam", "rb").read(3) == b"P7\n"
    channels = 1 if want.ndim == 2 else want.shape[2]
    if channels in (1, 3):
        out = tmp_path / ("x.pgm" if channels == 1 else "x.ppm")
        run("l3", "decode", l3, out)
        assert np.array_equal(np.asarray(Image.open(out)), want)


def test_cli_errors(edge_tree, tmp_path):
    l3 = tmp_path / "x.l3"
    run("l3", "encode", os.path.join(edge_tree, "png/rgb.png"), l3)
    p = run("l3", "decode", l3, tmp_path / "x.jpg", check=False)
    assert p.returncode == 2 and "x.jpg" in p.stderr
    p = run("l3", "decode", l3, tmp_path / "x.pgm", check=False)  # RGB has no PGM
    assert p.returncode == 2 and "x.pgm" in p.stderr
    p = run("l3", "decode", tmp_path / "missing.l3", tmp_path / "x.png", check=False)
    assert p.returncode == 1 and "missing.l3" in p.stderr
    p = run("l3", "encode", os.path.join(edge_tree, "other/labels.txt"), tmp_path / "y.l3", check=False)
    assert p.returncode == 1 and "labels.txt" in p.stderr and not (tmp_path / "y.l3").exists()
    p = run("l3", "encode", os.path.join(edge_tree, "png/depth16.png"), tmp_path / "y.l3", check=False)
    assert p.returncode == 1 and "depth16.png" in p.stderr
    p = run("l3", "decode", os.path.join(edge_tree, "png/rgb.png"), tmp_path / "y.png", check=False)
    assert p.returncode == 1 and "rgb.png" in p.stderr
    assert run("l3", "encode", check=False).returncode == 2


def test_sixteen_readers_decode_each_view_once(tmp_path):
    """16 readers on 16 FUSE threads, each reading whole NPY views (1.2 MB) of more files than the
    view cache holds (cache=48MiB: its budget is twice 16 views, 38 MB, where a quarter of the
    cache would hold 10): every view is decoded once (the cache holds the views readers are in,
    and views decoded at once never evict each other), and every byte equals the source's pixels."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    base = np.asarray(photo_like(random.Random(5), 768, 512))
    for i in range(48):
        Image.fromarray(np.roll(base, 37 * i, axis=1)).save(src / f"{i:02d}.png", compress_level=1)
    store = pack(str(tmp_path / "src"), str(tmp_path / "store"))
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt, "-o", "raw_format=npy,threads=16,cache=48MiB"):
        names = sorted(os.listdir(os.path.join(mnt, "cls")))
        assert len(names) == 48

        def read(name):
            with open(os.path.join(mnt, "cls", name), "rb") as f:
                return np.load(io.BytesIO(f.read()))

        with ThreadPoolExecutor(16) as ex:
            got = list(ex.map(read, names))
        views = json.load(open(os.path.join(mnt, ".fidelity", "stats")))["l3_views"]
    for i, g in enumerate(got):
        assert np.array_equal(g, np.roll(base, 37 * i, axis=1)), i
    assert views["budget"] < 48 * got[0].nbytes  # the views do not all fit
    assert views["renders"] == 48, views


def test_a_users_mount_reads_large_views_in_large_requests(request, user_mounts):
    """A non-root user's mount cannot raise its readahead (128 KiB requests): views over 1 MiB
    open with direct I/O, so reading a 6.2 MB NPY view whole takes at most 8 FUSE reads (48
    through the page cache), a shared map of it still works (np.load(mmap_mode="r")), and a
    small view keeps the page cache (read again, it costs no FUSE read)."""
    import pwd
    import re
    import shutil
    import tempfile
    from pathlib import Path
    from conftest import fid_bin
    if tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2]) < (6, 6):
        pytest.skip("the kernel cannot map direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP is Linux 6.6)")
    owner = pwd.getpwnam("www-data").pw_uid
    work = Path(tempfile.mkdtemp(prefix="fid-user-", dir="/tmp"))  # outside root's private pytest folders
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    (work / "src" / "cls").mkdir(parents=True)
    base = np.asarray(photo_like(__import__("random").Random(3), 480, 270))
    big = np.tile(base, (4, 4, 1))  # 1920x1080: a 6.2 MB NPY view
    Image.fromarray(big).save(work / "src" / "cls" / "big.png", compress_level=1)
    Image.fromarray(base[:64, :64]).save(work / "src" / "cls" / "small.png")
    store = pack(str(work / "src"), str(work / "store"))
    mnt = work / "mnt"
    mnt.mkdir()
    binary = shutil.copy(fid_bin(), work / "fidelityfs")  # the checkout may be closed to others
    for d in [work, *work.rglob("*")]:
        os.chmod(d, 0o755 if d.is_dir() or d.name == "fidelityfs" else 0o644)
    os.chown(mnt, owner, owner)
    (work / "cache").mkdir()
    os.chown(work / "cache", owner, owner)
    argv = ["setpriv", "--reuid", str(owner), "--regid", str(owner), "--clear-groups", binary, "mount", store,
            str(mnt), "-o", "allow_other,raw_format=npy"]
    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))

    def fuse_reads():
        return json.load(open(mnt / ".fidelity" / "stats"))["requests"]["read"]

    with mounted(store, str(mnt), argv=argv, env=env):
        path = mnt / "cls" / "big.png"  # the source name: raw_names=keep
        assert os.stat(path).st_size > 6_000_000
        before = fuse_reads()
        with open(path, "rb") as f:
            data = f.read()
        assert fuse_reads() - before <= 8, fuse_reads() - before
        assert np.array_equal(np.load(io.BytesIO(data)), big)
        assert np.array_equal(np.load(path, mmap_mode="r"), big)
        small = mnt / "cls" / "small.png"
        assert np.array_equal(np.load(small), base[:64, :64])
        before = fuse_reads()
        assert np.array_equal(np.load(small), base[:64, :64])
        assert fuse_reads() == before  # from the page cache
