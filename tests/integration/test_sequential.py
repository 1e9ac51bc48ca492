"""encoding=sequential: a JPEG level read as one sequential scan with the pixels of the progressive
level, with PIL, torchvision and djpeg, at every level, for every kind of JPEG the edge zoo holds
(gray, colour, CMYK, odd sizes, markers); sizes exact; the setting per subtree like scan_group."""
import errno
import io
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
from PIL import Image

from fidstore import Store
from mountutil import XA, mounted, wait_invalidations
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


def test_every_level_reads_sequential_with_the_progressive_pixels(edge_store, mnt):
    torchvision_io = pytest.importorskip("torchvision.io")
    torch = pytest.importorskip("torch")
    djpeg = shutil.which("djpeg") is not None
    st = Store(edge_store)
    jpegs = sorted(r for r, m in st.files.items() if m["kind"] == "jpeg")
    assert len(jpegs) >= 5
    with mounted(edge_store, mnt, "-o", "encoding=sequential"):
        assert json.loads(read(os.path.join(mnt, ".fidelity", "config")))["encoding"] == "sequential"
        for level in range(1, st.levels + 1):
            os.setxattr(mnt, XA, str(level).encode())
            # A change's entries may be dropped just after its reply (docs/MOUNT.md): wait for all.
            assert wait_invalidations(mnt)
            for rel in jpegs:
                p = os.path.join(mnt, rel)
                progressive = st.read(rel, level)
                data = read(p)
                assert os.stat(p).st_size == len(data), (rel, level)
                assert os.getxattr(p, XE) == b"sequential"
                frame, scans = frame_and_scans(data)
                assert frame in (0xC0, 0xC1), (rel, level, hex(frame))
                assert pixels_pil(data)[0] == pixels_pil(progressive)[0]
                assert np.array_equal(pixels_pil(data)[1], pixels_pil(progressive)[1]), (rel, level)
                if djpeg:
                    assert pixels_djpeg(data) == pixels_djpeg(progressive), (rel, level)
                if pixels_pil(progressive)[0] in ("L", "RGB"):  # torchvision reads no CMYK
                    got = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
                    want = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(progressive), dtype=torch.uint8))
                    assert torch.equal(got, want), (rel, level)
                # The stored file's APPn and COM segments are kept (EXIF orientation, ICC).
                for marker in (b"\xff\xe1", b"\xff\xe2", b"\xff\xfe"):
                    assert (marker in progressive[:progressive.find(b"\xff\xda")]) <= (marker in data), (rel, marker)
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
