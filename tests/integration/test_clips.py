"""Clips over a real mount: pack keeps a rawframes folder's frames together (clips auto), the
store says so (inspect, format 5, the second reader), every frame reads right at every level, and
a clip read frame by frame, or sparse as TSN reads it, costs one storage read at any level; an
image-classification store gets no clips."""
import errno
import json
import os
import subprocess
import threading

import numpy as np
import pytest
from PIL import Image

from conftest import fid_bin, index_meta
from fidstore import Store
from mountutil import mounted
from mountutil import read_file as read

CLIPS, FRAMES = 6, 12


@pytest.fixture(scope="module")
def clip_tree(tmp_path_factory):
    """Six clips in mmaction2's layout (CLASS/VIDEO/img_N.jpg, unpadded numbers: natural order
    matters) panning over a gradient with noise, and one loose image beside them."""
    src = tmp_path_factory.mktemp("clips") / "src"
    rng = np.random.default_rng(5)
    y, x = np.mgrid[0:120, 0:400]
    scene = np.stack([x * 0.6, y * 2.0, (x + y) * 0.4], -1)
    for c in range(CLIPS):
        folder = src / f"class{c % 2}" / f"video_{c}"
        folder.mkdir(parents=True)
        for i in range(FRAMES):
            frame = scene[:, i * 10:i * 10 + 160] + rng.normal(0, 4, (120, 160, 3)) + c * 7
            Image.fromarray(np.clip(frame, 0, 255).astype(np.uint8)).save(folder / f"img_{i + 1}.jpg", quality=90)
    Image.fromarray(rng.integers(0, 256, (50, 60, 3), dtype=np.uint8)).save(src / "class0" / "loose.jpg")
    return src


@pytest.fixture(scope="module")
def clip_store(clip_tree, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("clips") / "store")
    p = subprocess.run([fid_bin(), "pack", str(clip_tree), store, "--progress", "off", "--record-bytes", "256KiB"],
                       capture_output=True, text=True, check=True)
    assert f"clips: {CLIPS} folders of frames ({CLIPS * FRAMES} files)" in p.stdout, p.stdout
    return store


def frames_of(st, folder):
    return sorted((r for r in st.files if os.path.dirname(r) == folder), key=lambda r: int(r.split("_")[-1][:-4]))


def clip_frames(st):
    """Each clip's folder: its frames' names in the order its runs hold them."""
    by_slot = {(f["record"], f["slot"]): rel for rel, f in st.files.items()}
    runs = {}
    for c in st.clips:
        names = [by_slot[(c["record"], c["first_slot"] + j)] for j in range(c["frames"])]
        runs.setdefault(os.path.dirname(names[0]), []).extend(names)
    return runs


def test_pack_keeps_each_clip_together_in_frame_order(clip_store):
    st = Store(clip_store)
    assert st.version == 5 and index_meta(clip_store)["format_version"] == "5"
    st.check_headers()
    runs = clip_frames(st)
    assert len(runs) == CLIPS
    for folder, names in runs.items():
        assert names == frames_of(st, folder), folder  # img_2 before img_10, no frame of another file between
    summary = json.loads(subprocess.run([fid_bin(), "inspect", "--json", clip_store], capture_output=True, text=True,
                                        check=True).stdout)
    assert summary["clips"]["clips"] == CLIPS and summary["clips"]["frames"] == CLIPS * FRAMES
    assert "loose.jpg" not in {os.path.basename(n) for n in sum(runs.values(), [])}


def test_an_image_classification_store_has_no_clips(imagenet_store):
    assert Store(imagenet_store).clips == []
    assert int(index_meta(imagenet_store)["format_version"]) < 5


def test_clip_frames_read_right_and_a_clip_costs_one_read(clip_store, mnt):
    """random_reads=pieces, so that no record is loaded whole: each clip is read once, at level 5
    and then at full, its frames from its cached run; the bytes are the second reader's."""
    st = Store(clip_store)
    folders = sorted({os.path.dirname(r) for r in st.files if "video_" in r})
    with mounted(clip_store, mnt, "-o", "random_reads=pieces,scan_group=5"):
        for level in (5, None):
            if level is None:
                os.setxattr(mnt, "user.fidelity.scan_group", b"full")
            before = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
            for folder in folders:
                rels = frames_of(st, folder)
                got = {}
                readers = [threading.Thread(target=lambda r=r: got.__setitem__(r, read(os.path.join(mnt, r))))
                           for r in rels[::3]]  # sparse, and at once
                for t in readers:
                    t.start()
                for t in readers:
                    t.join()
                for r in rels:  # then every frame, in order
                    got[r] = read(os.path.join(mnt, r))
                for r in rels:
                    assert got[r] == st.read(r, level), (r, level)
            after = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
            loads = after["clips"]["loads"] - before["clips"]["loads"]
            assert loads == len(st.clips), (loads, st.clips)  # each run once
            assert after["storage_reads"] - before["storage_reads"] == loads
            want = sum(size for _, _, size in st.clip_ranges(level or st.levels))
            assert after["clips"]["bytes"] - before["clips"]["bytes"] == want


def test_published_orders_draw_a_clip_as_one_unit(clip_store, mnt):
    """epoch-N and rank shares give each clip's frames one after another in frame order, and are
    the second reader's orders, written from docs/FORMAT.md."""
    import fidstore

    st = Store(clip_store)
    seed = int(st.meta["seed"])
    with mounted(clip_store, mnt):
        for name, want in (("epoch-1", fidstore.epoch_order(st, seed, 1)),
                           ("epoch-0.rank-1-of-2", fidstore.epoch_order(st, seed, 0, 1, 2))):
            got = read(os.path.join(mnt, ".fidelity", "order", name)).decode().splitlines()
            assert got == want, name
            for folder in {os.path.dirname(r) for r in got if "video_" in r}:
                at = [i for i, r in enumerate(got) if os.path.dirname(r) == folder]
                frames = frames_of(st, folder)
                if len(at) == len(frames):  # the whole clip in this order: together, in frame order
                    assert at == list(range(at[0], at[0] + len(at))) and [got[i] for i in at] == frames, name


def test_relayout_carries_clips_both_ways(clip_store, tmp_path):
    """file -> scan -> file: the clips table and format 5 stay, every frame reads the same bytes
    at every level from the second reader, and the way back gives the packed records exactly."""
    st = Store(clip_store)
    scan, back = str(tmp_path / "scan"), str(tmp_path / "back")
    for src, out, layout in ((clip_store, scan, "scan"), (scan, back, "file")):
        subprocess.run([fid_bin(), "relayout", src, out, "--layout", layout, "--progress", "off"],
                       capture_output=True, text=True, check=True)
    for store in (scan, back):
        got = Store(store)
        assert got.version == 5 and got.clips == st.clips, store
        got.check_headers()
        subprocess.run([fid_bin(), "verify", store, "--progress", "off"], capture_output=True, check=True)
        for rel in st.files:
            assert got.all_levels(rel) == st.all_levels(rel), (store, rel)
    for path, _, _ in st.records.values():
        with open(os.path.join(clip_store, path), "rb") as a, open(os.path.join(back, path), "rb") as b:
            assert a.read() == b.read(), path


def test_clip_reads_off_reads_each_frame_alone(clip_store, mnt):
    """clip_reads=off on one clip's folder: its frames are read alone (a read a range of their
    pieces, which lie by level in the run), the bytes
    unchanged, while another clip still costs one read; -o clip_reads=off turns it off mount-wide.
    The attribute is inherited as levels are and takes only on or off."""
    st = Store(clip_store)
    folders = sorted({os.path.dirname(r) for r in st.files if "video_" in r})
    off, on = folders[0], folders[1]

    def ranges(folder):  # a frame's pieces up to level 5, as contiguous ranges: by level in its run
        n = 0
        for r in frames_of(st, folder):
            pieces = st.files[r]["pieces"][:6]
            n += 1 + sum(a[0] + a[1] != b[0] for a, b in zip(pieces, pieces[1:]))
        return n

    def reads_for(folder):
        before = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        for r in frames_of(st, folder):
            assert read(os.path.join(mnt, r)) == st.read(r, 5), r
        after = json.loads(read(os.path.join(mnt, ".fidelity", "stats")))
        return after["storage_reads"] - before["storage_reads"], after["clips"]["loads"] - before["clips"]["loads"]

    with mounted(clip_store, mnt, "-o", "random_reads=pieces,scan_group=5"):
        os.setxattr(os.path.join(mnt, off), "user.fidelity.clip_reads", b"off")
        frame = os.path.join(mnt, frames_of(st, off)[0])
        assert os.getxattr(frame, "user.fidelity.clip_reads") == b"off"
        assert os.getxattr(os.path.join(mnt, on), "user.fidelity.clip_reads") == b"on"
        assert "user.fidelity.clip_reads" in os.listxattr(frame)
        with pytest.raises(OSError) as e:
            os.setxattr(frame, "user.fidelity.clip_reads", b"sometimes")
        assert e.value.errno == errno.EINVAL
        assert reads_for(off) == (ranges(off), 0)
        assert reads_for(on) == (1, 1)
    with mounted(clip_store, mnt, "-o", "random_reads=pieces,scan_group=5,clip_reads=off"):
        assert reads_for(on) == (ranges(on), 0)
        os.setxattr(os.path.join(mnt, folders[2]), "user.fidelity.clip_reads", b"on")
        assert reads_for(folders[2]) == (1, 1)


def test_merge_carries_clips(clip_tree, clip_store, tmp_path):
    """pack --shard keeps each clip in one part; merging the parts gives the single pack's files
    and bytes, and the same clips, each a run of its frames in frame order (format 5)."""
    parts = []
    for i in range(3):
        parts.append(str(tmp_path / f"part{i}"))
        subprocess.run([fid_bin(), "pack", str(clip_tree), parts[-1], "--shard", f"{i}/3", "--progress", "off",
                        "--record-bytes", "256KiB"], capture_output=True, text=True, check=True)
    merged = str(tmp_path / "merged")
    subprocess.run([fid_bin(), "merge", *parts, merged], capture_output=True, text=True, check=True)
    st, single = Store(merged), Store(clip_store)
    assert st.version == 5 and len(st.clips) == len(single.clips)
    assert clip_frames(st) == clip_frames(single)
    assert st.files.keys() == single.files.keys()
    for rel in single.files:
        assert st.all_levels(rel) == single.all_levels(rel), rel
    subprocess.run([fid_bin(), "verify", merged, "--progress", "off"], capture_output=True, check=True)


def stats(mnt):
    return json.loads(read(os.path.join(mnt, ".fidelity", "stats")))


def test_a_clip_read_costs_one_read_request_its_other_frames_pushed(clip_store, mnt):
    """The first frame's READ loads the clip's run; its other frames go to the kernel's page cache
    (FUSE_NOTIFY_STORE): a loader that lists the folder and reads every frame sends a READ only for
    frames it reaches before their push; one that builds the paths (no listing) its LOOKUPs too.
    Every byte is the second reader's, at full and at level 3; sequential frames are not pushed
    (made by their own reads) and read right; clip_push=off, or a cap below a frame, sends a READ
    a frame."""
    st = Store(clip_store)
    folders = sorted({os.path.dirname(r) for r in st.files if "video_" in r})

    def read_clips(listing, level):
        before = stats(mnt)
        for folder in folders:
            if listing:
                assert sorted(os.listdir(os.path.join(mnt, folder))) == sorted(os.path.basename(r) for r in
                                                                               frames_of(st, folder))
            for r in frames_of(st, folder):
                data = read(os.path.join(mnt, r))
                assert len(data) == os.stat(os.path.join(mnt, r)).st_size, r
                if level:
                    assert data == st.read(r, level), (r, level)
        after = stats(mnt)
        return (after["requests"]["read"] - before["requests"]["read"],
                after["requests"]["lookup"] - before["requests"]["lookup"],
                after["clips"]["pushed_frames"] - before["clips"]["pushed_frames"],
                after["clips"]["push_lookups"] - before["clips"]["push_lookups"],
                after["clips"]["push_listings"] - before["clips"]["push_listings"])

    # Every frame is either pushed or read; how many READs the pushes save (a frame whose READ
    # overtakes its push is read) is the benchmark's to say (scripts/bench/clips.sh).
    clips = len(folders)
    for level in (3, st.levels):
        with mounted(clip_store, mnt, "-o", f"scan_group={level},readdir=plus"):
            reads, _, frames, _, _ = read_clips(True, level)
            assert reads <= clips * FRAMES and reads + frames >= clips * FRAMES and frames > 0, (level, reads, frames)
        with mounted(clip_store, mnt, "-o", f"scan_group={level}"):
            # The first frame's lookup has the daemon list the clip's folder itself: readdir=auto
            # lists an uncached folder's first chunk with attributes, so the kernel makes every
            # frame's inode then, none is looked up one by one for the reader, and the reader's
            # own lookups of the frames after the listing find the names cached.
            reads, lookups, frames, for_reader, listings = read_clips(False, level)
            assert reads <= clips * FRAMES and reads + frames >= clips * FRAMES, (level, reads, frames)
            # (A second listing where the reader's second lookup overtook the first.)
            assert clips <= listings <= 2 * clips and for_reader == 0, (listings, for_reader)
            # At least the first frames, their folders and the two classes; at most every frame.
            assert clips * 2 + 2 <= lookups <= clips * (FRAMES + 1) + 2, lookups
        with mounted(clip_store, mnt, "-o", f"scan_group={level},readdir=plain"):
            # A listing without attributes makes no inode: the second frame's lookup has the daemon
            # look the frames up itself.
            reads, lookups, frames, for_reader, listings = read_clips(False, level)
            assert reads <= clips * FRAMES and reads + frames >= clips * FRAMES, (level, reads, frames)
            assert lookups == clips * (FRAMES + 1) + 2, lookups
            assert clips <= listings <= 2 * clips and 0 < for_reader <= clips * (FRAMES - 2), (listings, for_reader)
    with mounted(clip_store, mnt, "-o", "scan_group=3,encoding=sequential,readdir=plus"):
        reads, _, frames, _, _ = read_clips(True, None)
        assert (reads, frames) == (clips * FRAMES, 0)
    for opts in ("clip_push=off", "clip_push_bytes=16"):
        with mounted(clip_store, mnt, "-o", f"scan_group=3,readdir=plus,{opts}"):
            reads, _, frames, _, _ = read_clips(True, 3)
            assert (reads, frames) == (clips * FRAMES, 0), opts


def test_pushed_frames_stay_right_under_level_changes(clip_store, mnt):
    """Readers that list a clip and read its frames while others change the clips' levels (files
    and folders): every read is one level's whole frame, its size the inode's stat size, and
    frames were pushed all along."""
    import random
    import time

    st = Store(clip_store)
    folders = sorted({os.path.dirname(r) for r in st.files if "video_" in r})
    levels = {r: {bytes(b): k for k, b in enumerate(st.all_levels(r), 1)} for r in st.files if "video_" in r}
    errors, counts = [], {"reads": 0, "flips": 0}
    deadline = time.monotonic() + 4.0

    def reader(seed):
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            folder = rng.choice(folders)
            os.listdir(os.path.join(mnt, folder))
            for r in frames_of(st, folder):
                with open(os.path.join(mnt, r), "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    data = f.read()
                counts["reads"] += 1
                if len(data) != size:
                    errors.append(f"{r}: {len(data)} bytes read, stat says {size}")
                elif data not in levels[r]:
                    errors.append(f"{r}: {len(data)} bytes match no level")

    def flipper(seed):
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            target = os.path.join(mnt, rng.choice([rng.choice(folders), rng.choice(list(levels))]))
            os.setxattr(target, "user.fidelity.scan_group", str(rng.randint(1, st.levels)).encode())
            counts["flips"] += 1

    with mounted(clip_store, mnt, "-o", "readdir=plus"):
        threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=flipper, args=(10 + i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pushed = stats(mnt)["clips"]["pushed_frames"]
    assert errors == [], errors[:10]
    assert counts["reads"] > 100 and counts["flips"] > 20 and pushed > 0, (counts, pushed)
