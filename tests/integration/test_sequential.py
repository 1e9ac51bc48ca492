"""encoding=sequential: a JPEG level read as one sequential scan with the pixels of the progressive
level, with PIL, torchvision and djpeg, at every level, for every kind of JPEG the edge zoo holds
(gray, colour, CMYK, odd sizes, markers); sizes exact; the setting per subtree like scan_group."""
import concurrent.futures
import errno
import io
import json
import os
import shutil
import struct
import subprocess
import threading

import numpy as np
import pytest
from PIL import Image

from conftest import fid_bin
from fidstore import Store
from mountutil import XA, fuse_connection, fusectl, mounted, wait_invalidations
from mountutil import read_file as read

XE = "user.fidelity.encoding"


def pixels_pil(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im.mode, np.asarray(im)


def pixels_djpeg(data):
    p = subprocess.run(["djpeg", "-pnm"], input=data, capture_output=True, check=True)
    assert not p.stderr, p.stderr  # no libjpeg warning either
    return p.stdout


def frame_and_scans(data):
    """The SOF marker code and the number of SOS markers, from walking the segments."""
    i, frame, scans = 2, None, 0
    while i + 4 <= len(data):
        assert data[i] == 0xFF, i
        marker = data[i + 1]
        if marker == 0xD9:
            break
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            frame = marker
        if marker == 0xDA:
            scans += 1
            j = i + 2 + length
            while not (data[j] == 0xFF and data[j + 1] not in (0x00, *range(0xD0, 0xD8))):
                j += 1
            i = j
            continue
        i += 2 + length
    return frame, scans


def check_sequential_file(mnt, st, rel, level, djpeg, torch, torchvision_io):
    """The file as read (sequential) against its progressive level: frame, size, pixels with PIL,
    djpeg and torchvision (when given), markers kept."""
    p = os.path.join(mnt, rel)
    progressive = st.read(rel, level)
    data = read(p)
    assert os.stat(p).st_size == len(data), (rel, level)
    assert os.getxattr(p, XE) == b"sequential"
    frame, scans = frame_and_scans(data)
    assert frame in (0xC0, 0xC1), (rel, level, hex(frame))
    (got_mode, got), (want_mode, want) = pixels_pil(data), pixels_pil(progressive)
    assert got_mode == want_mode
    assert np.array_equal(got, want), (rel, level)
    if djpeg:
        assert pixels_djpeg(data) == pixels_djpeg(progressive), (rel, level)
    if torch is not None and want_mode in ("L", "RGB"):  # torchvision reads no CMYK
        got = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        want = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(progressive), dtype=torch.uint8))
        assert torch.equal(got, want), (rel, level)
    # The stored file's APPn and COM segments are kept (EXIF orientation, ICC).
    for marker in (b"\xff\xe1", b"\xff\xe2", b"\xff\xfe"):
        assert (marker in progressive[:progressive.find(b"\xff\xda")]) <= (marker in data), (rel, marker)


def test_every_level_reads_sequential_with_the_progressive_pixels(edge_store, mnt):
    torchvision_io = pytest.importorskip("torchvision.io")
    torch = pytest.importorskip("torch")
    djpeg = shutil.which("djpeg") is not None
    st = Store(edge_store)
    jpegs = sorted(r for r, m in st.files.items() if m["kind"] == "jpeg")
    assert len(jpegs) >= 5
    # The zoo's large photos (an 8K one) take most of the time: each walks its levels through its
    # own attribute on a thread of its own, while this thread walks the others through the mount
    # root's level (a file's own level overrides its folders'); the decoders release the GIL.
    large = [r for r in jpegs if st.files[r]["source_size"] >= 1 << 20]
    small = [r for r in jpegs if r not in large]

    def walk_levels_of(rel):
        """PIL at every level; djpeg and torchvision too at levels 1, 5 and full (decoding 33
        megapixels six times a level would take a minute)."""
        for level in range(1, st.levels + 1):
            os.setxattr(os.path.join(mnt, rel), XA, str(level).encode())
            assert wait_invalidations(mnt)
            every = level in (1, 5, st.levels)
            check_sequential_file(mnt, st, rel, level, djpeg and every, torch if every else None, torchvision_io)

    with mounted(edge_store, mnt, "-o", "encoding=sequential"):
        assert json.loads(read(os.path.join(mnt, ".fidelity", "config")))["encoding"] == "sequential"
        with concurrent.futures.ThreadPoolExecutor(max(1, len(large))) as pool:
            walks = [pool.submit(walk_levels_of, rel) for rel in large]
            for level in range(1, st.levels + 1):
                os.setxattr(mnt, XA, str(level).encode())
                # A change's entries may be dropped just after its reply (docs/MOUNT.md): wait for all.
                assert wait_invalidations(mnt)
                for rel in small:
                    check_sequential_file(mnt, st, rel, level, djpeg, torch, torchvision_io)
            for walk in walks:
                walk.result()  # raises the check's AssertionError
        stats = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        assert stats["sequential_made"] >= len(jpegs) * st.levels
        metrics = read(os.path.join(mnt, ".fidelity", "metrics")).decode()
        assert "fidelityfs_sequential_made_total{" in metrics


def test_encoding_per_subtree_and_views(edge_store, mnt):
    st = Store(edge_store)
    jpegs = sorted(r for r, m in st.files.items() if m["kind"] == "jpeg" and "/" in r)
    rel = jpegs[0]
    folder = os.path.join(mnt, os.path.dirname(rel))
    others = [r for r in st.files if st.files[r]["kind"] == "jpeg" and not r.startswith(os.path.dirname(rel) + "/")]
    blob = next(r for r, m in st.files.items() if m["kind"] != "jpeg")
    with mounted(edge_store, mnt, "-o", "scan_group=5"):
        p = os.path.join(mnt, rel)
        assert read(p) == st.read(rel, 5)
        assert os.getxattr(p, XE) == b"progressive" and os.getxattr(mnt, XE) == b"progressive"
        assert XE in os.listxattr(p) and XE in os.listxattr(mnt)
        os.setxattr(folder, XE, b"Sequential\n")  # keywords in any case, a trailing newline ignored
        assert wait_invalidations(mnt)
        assert os.getxattr(folder, XE) == b"sequential" and os.getxattr(p, XE) == b"sequential"
        seq = read(p)
        assert frame_and_scans(seq)[0] in (0xC0, 0xC1) and os.stat(p).st_size == len(seq)
        assert np.array_equal(pixels_pil(seq)[1], pixels_pil(st.read(rel, 5))[1])
        assert read(os.path.join(mnt, others[0])) == st.read(others[0], 5)  # outside the folder: as stored
        # A level change keeps the encoding; the file's own override beats its folder's.
        os.setxattr(p, XA, b"2")
        assert wait_invalidations(mnt)
        assert np.array_equal(pixels_pil(read(p))[1], pixels_pil(st.read(rel, 2))[1])
        assert frame_and_scans(read(p))[0] in (0xC0, 0xC1)
        os.setxattr(p, XE, b"progressive")
        assert wait_invalidations(mnt)
        assert read(p) == st.read(rel, 2)
        os.removexattr(p, XE)
        assert wait_invalidations(mnt)
        assert frame_and_scans(read(p))[0] in (0xC0, 0xC1)
        os.removexattr(folder, XE)
        assert wait_invalidations(mnt)
        assert read(p) == st.read(rel, 2)
        # Views read as stored; bad values, non-JPEG files and missing overrides fail as for levels.
        view = os.path.join(mnt, ".fidelity", "sg", "3", rel)
        assert os.getxattr(view, XE) == b"progressive"
        for path, value, code in ((p, b"baseline", errno.EINVAL), (view, b"sequential", errno.EPERM),
                                  (os.path.join(mnt, blob), b"sequential", errno.EINVAL)):
            with pytest.raises(OSError) as e:
                os.setxattr(path, XE, value)
            assert e.value.errno == code, (path, value)
        with pytest.raises(OSError) as e:
            os.removexattr(folder, XE)
        assert e.value.errno == errno.ENODATA


def crafted_uncodable_jpeg():
    """A progressive gray 8x8 JPEG, quantiser 1, whose one AC value, 4000 (coded as 1000 with a
    point transform of 2), no sequential JPEG codes; no value it can code gives the same samples
    (a square wave of 255 and 0)."""
    def seg(marker, payload):
        return b"\xff" + bytes([marker]) + struct.pack(">H", len(payload) + 2) + payload
    dqt = seg(0xDB, b"\x00" + b"\x01" * 64)
    sof = seg(0xC2, bytes([8]) + struct.pack(">HH", 8, 8) + bytes([1, 1, 0x11, 0]))
    dht_dc = seg(0xC4, bytes([0x00, 1] + [0] * 15) + bytes([0]))  # one code, "0": category 0
    sos_dc = seg(0xDA, bytes([1, 1, 0x00, 0, 0, 0x00])) + b"\x7f"  # DC difference 0, then padding
    dht_ac = seg(0xC4, bytes([0x10, 0, 2] + [0] * 14) + bytes([0x0A, 0x00]))  # "00": run 0 size 10, "01": EOB
    sos_ac = seg(0xDA, bytes([1, 1, 0x00, 1, 63, 0x02])) + b"\x3e\x87"  # 1000 (<< 2) at zigzag 1, EOB
    return b"\xff\xd8" + dqt + sof + dht_dc + sos_dc + dht_ac + sos_ac + b"\xff\xd9"


@pytest.fixture(scope="module")
def high_quality_store(tmp_path_factory):
    """JPEGs at quality 90-100 with black and white areas (their DC estimates leave -1024..1023
    at level 1 from quality 96 on): Pillow's 4:4:4, 4:2:2, 4:2:0, gray and CMYK, cjpeg's 4:4:4 and
    4:2:0; and the crafted file no sequential JPEG can code."""
    src = tmp_path_factory.mktemp("hq") / "src"
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:120, 0:160]
    base = np.stack([x * 1.5, y * 2.0, (x + y) * 0.9], -1) + rng.normal(0, 6, (120, 160, 3))
    base[:, :40] = 0
    base[:, 120:] = 255
    base[60:70] = 0
    im = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    (src / "pil").mkdir(parents=True)
    (src / "cjpeg").mkdir()
    for q in (90, 95, 96, 98, 100):
        for name, sub in (("444", 0), ("422", 1), ("420", 2)):
            im.save(src / "pil" / f"q{q}_{name}.jpg", quality=q, subsampling=sub)
        im.convert("L").save(src / "pil" / f"q{q}_gray.jpg", quality=q)
        im.convert("CMYK").save(src / "pil" / f"q{q}_cmyk.jpg", quality=q)
    if shutil.which("cjpeg"):
        ppm = io.BytesIO()
        im.save(ppm, "PPM")
        for q in (97, 100):
            for sample in ("1x1", "2x2"):
                subprocess.run(["cjpeg", "-quality", str(q), "-sample", sample, "-outfile",
                                str(src / "cjpeg" / f"q{q}_{sample}.jpg")], input=ppm.getvalue(), check=True)
    (src / "crafted.jpg").write_bytes(crafted_uncodable_jpeg())
    store = str(tmp_path_factory.mktemp("hq") / "store")
    subprocess.run([fid_bin(), "pack", str(src), store, "--progress", "off"], check=True, capture_output=True)
    return store


def test_high_quality_jpegs_read_sequential_at_every_level(high_quality_store, mnt, tmp_path):
    """No EIO at any level: a value a sequential JPEG cannot code is moved where the samples allow
    (every Pillow and cjpeg file stays sequential), and the crafted file, which has no sequential
    form, reads as its progressive level: counted, logged once, the same pixels."""
    st = Store(high_quality_store)
    jpegs = sorted(r for r, m in st.files.items() if m["kind"] == "jpeg")
    assert "crafted.jpg" in jpegs and len(jpegs) >= 26
    fallbacks = 0
    log = tmp_path / "daemon.log"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"encoding: sequential\nlog: {{file: {log}}}\n")
    with mounted(high_quality_store, mnt, "--config", str(cfg)):
        for level in range(1, st.levels + 1):
            os.setxattr(mnt, XA, str(level).encode())
            assert wait_invalidations(mnt)
            for rel in jpegs:
                p = os.path.join(mnt, rel)
                progressive = st.read(rel, level)
                data = read(p)  # raises on EIO
                assert os.stat(p).st_size == len(data), (rel, level)
                assert np.array_equal(pixels_pil(data)[1], pixels_pil(progressive)[1]), (rel, level)
                if data == progressive:
                    assert rel == "crafted.jpg", (rel, level)
                    fallbacks += 1
                else:
                    assert frame_and_scans(data)[0] in (0xC0, 0xC1), (rel, level)
        stats = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        metrics = read(os.path.join(mnt, ".fidelity", "metrics")).decode()
    assert fallbacks >= st.levels - 1  # every level with the AC value in it
    assert stats["sequential_fallbacks"] == fallbacks and stats["eio_errors"] == 0
    assert "fidelityfs_sequential_fallbacks_total{" in metrics
    said = [line for line in log.read_text().splitlines() if "served progressive" in line]
    assert len(said) == 1 and "crafted.jpg: level" in said[0] and "out of the range" in said[0], said


@pytest.fixture(scope="module")
def large_store(tmp_path_factory):
    """Eight 2400x1800 JPEGs of noise in one folder: a sequential re-encoding of each takes a
    good part of a second."""
    src = tmp_path_factory.mktemp("large") / "src"
    (src / "one").mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, (1800, 2400, 3), dtype=np.uint8)).save(src / "one" / f"{i}.jpg", quality=95)
    store = str(tmp_path_factory.mktemp("large") / "store")
    subprocess.run([fid_bin(), "pack", str(src), store, "--progress", "off"], check=True, capture_output=True)
    return store


def test_first_lookups_in_one_folder_run_at_once(large_store, mnt):
    """Eight first stats in one folder, each making its file's sequential level: the kernel has
    them all in flight at once (fusectl's `waiting`), where it would hold the folder's lock for
    one lookup at a time without FUSE_PARALLEL_DIROPS."""
    with mounted(large_store, mnt, "-o", "encoding=sequential"), fusectl() as ctl:
        waiting = os.path.join(ctl, str(fuse_connection(mnt)), "waiting")
        threads = [threading.Thread(target=os.stat, args=(os.path.join(mnt, "one", f"{i}.jpg"),)) for i in range(8)]
        for t in threads:
            t.start()
        most = 0
        while any(t.is_alive() for t in threads):
            with open(waiting) as f:
                most = max(most, int(f.read()))
        for t in threads:
            t.join()
    assert most >= 4, most


def test_re_encodings_in_flight_stay_within_sequential_memory(large_store, mnt):
    """With sequential_memory below one re-encoding's need, concurrent first reads run one at a
    time (the most ever claimed at once is one file's need) and every file reads right."""
    st = Store(large_store)
    rels = sorted(st.files)
    with mounted(large_store, mnt, "-o", "encoding=sequential,sequential_memory=1"):
        os.stat(os.path.join(mnt, rels[0]))
        one = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))["sequential_memory"]["peak"]
        threads = [threading.Thread(target=read, args=(os.path.join(mnt, r),)) for r in rels[1:]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        for rel in rels:
            data = read(os.path.join(mnt, rel))
            assert np.array_equal(pixels_pil(data)[1], pixels_pil(st.read(rel, st.levels))[1]), rel
    memory = stats["sequential_memory"]
    assert memory["budget"] == 1 and memory["used"] == 0
    # The files are alike (their needs within 1%): never two claims at once.
    assert one > 2400 * 1800 * 3 * 2 and one <= memory["peak"] < 1.5 * one
    assert stats["sequential_made"] == len(rels) and stats["eio_errors"] == 0
