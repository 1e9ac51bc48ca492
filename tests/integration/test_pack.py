"""pack / inspect / verify on real trees, checked through an independent reader of the format."""
import ctypes
import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
from PIL import Image

import fidstore
from conftest import fid_bin, manifest, pack, run
from mountutil import is_mounted, mount, remount_tmpfs, tmpfs


def tree_digest(root):
    """Hash of every path, type and content below root (symlinks as links): detects any change."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + sorted(dirnames):
            p = os.path.join(dirpath, name)
            h.update(p.encode("utf-8", "surrogateescape"))
            st = os.lstat(p)
            h.update(str((st.st_mode, st.st_size, st.st_mtime_ns)).encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def pixels(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im.mode, np.asarray(im)


def djpeg_clean(data):
    """libjpeg-turbo's own decoder must accept the bytes without a single warning."""
    p = subprocess.run(["djpeg", "-strict", "-outfile", os.devnull], input=data, capture_output=True)
    return p.returncode == 0 and not p.stderr, p.stderr.decode(errors="replace")


def test_edge_zoo_manifest(edge_tree, edge_store):
    st = fidstore.Store(edge_store)
    skipped = {p for p, _ in st.skipped}
    for row in manifest(edge_tree):
        rel, expect = row["path"], row["expectation"]
        src = os.path.join(edge_tree, rel)
        if rel.endswith("/"):
            assert rel.rstrip("/") in st.all_dirs(), rel
            continue
        source_bytes = open(src, "rb").read()
        if expect == "progressive":
            assert st.files[rel]["kind"] == "jpeg", rel
            full = st.read(rel)
            assert pixels(full)[1].tobytes() == pixels(source_bytes)[1].tobytes(), f"{rel}: full level differs"
            sizes = [len(st.read(rel, k)) for k in range(1, st.levels + 1)]
            assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), f"{rel}: level sizes {sizes}"
            for k in (1, 5, st.levels):
                ok, err = djpeg_clean(st.read(rel, k))
                assert ok, f"{rel} level {k}: {err}"
        elif expect == "lossless":
            assert st.files[rel]["kind"] == "l3", rel
        elif expect == "passthrough":
            assert st.files[rel]["kind"] in ("blob", "l3"), rel
            if st.files[rel]["kind"] == "blob":
                assert st.read(rel) == source_bytes, rel
        else:  # reject-or-passthrough
            assert rel in skipped or st.read(rel) == source_bytes, rel


def test_markers_kept(edge_tree, edge_store):
    st = fidstore.Store(edge_store)
    for rel, marker in [("jpeg/exif_orientation.jpg", b"Exif\0\0"), ("jpeg/icc.jpg", b"ICC_PROFILE\0")]:
        if rel not in st.files:
            continue
        header = st.piece(rel, 0)
        assert marker in header, rel
        im = Image.open(io.BytesIO(st.read(rel, 1)))
        if marker.startswith(b"Exif"):
            assert im.getexif().get(0x0112) == 6
        else:
            assert im.info.get("icc_profile") == Image.open(os.path.join(edge_tree, rel)).info.get("icc_profile")


def test_verify_and_inspect(edge_store):
    assert run("verify", edge_store, "--progress", "off").returncode == 0
    info = json.loads(run("inspect", edge_store, "--json").stdout)
    for key in ("format_version", "files", "by_kind", "levels", "bytes_by_level", "source_bytes", "store_bytes",
                "records"):
        assert key in info, key
    st = fidstore.Store(edge_store)
    assert info["files"] == len(st.files)
    assert info["levels"] == 10
    assert info["by_kind"]["jpeg"] == sum(f["kind"] == "jpeg" for f in st.files.values())
    levels = info["bytes_by_level"]
    assert len(levels) == 10 and levels == sorted(levels)
    jpegs = [r for r, f in st.files.items() if f["kind"] == "jpeg"]
    assert levels[4] == sum(len(st.read(r, 5)) for r in jpegs)
    on_disk = os.path.getsize(os.path.join(edge_store, "index.sqlite")) + sum(
        os.path.getsize(os.path.join(edge_store, "records", n)) for n in os.listdir(os.path.join(edge_store, "records")))
    assert info["store_bytes"] == on_disk


def test_source_untouched_and_deterministic(imagenet_tree, tmp_path):
    before = tree_digest(imagenet_tree)
    a = pack(imagenet_tree, str(tmp_path / "a"), "--jobs", "2", "--record-bytes", "1MiB")
    b = pack(imagenet_tree, str(tmp_path / "b"), "--jobs", "1", "--record-bytes", "1MiB")
    assert tree_digest(imagenet_tree) == before
    recs = sorted(os.listdir(os.path.join(a, "records")))
    assert recs == sorted(os.listdir(os.path.join(b, "records"))) and len(recs) > 1
    for r in recs:
        assert open(os.path.join(a, "records", r), "rb").read() == open(os.path.join(b, "records", r), "rb").read()


def test_records_mix_classes_and_prefix_layout(imagenet_store):
    st = fidstore.Store(imagenet_store)
    by_record = {}
    for rel, f in st.files.items():
        if f["kind"] == "jpeg":
            by_record.setdefault(f["record"], []).append((f["slot"], rel, f))
    assert len(by_record) >= 3
    for rec, members in by_record.items():
        classes = {rel.split("/")[0] for _, rel, _ in members}
        assert len(classes) >= min(3, len(members)), f"record {rec} holds one class: not shuffled"
        members.sort()
        # PCR layout: all level-k pieces of the record are contiguous and in slot order, and
        # level k's region follows level k-1's.
        end = None
        for k in range(st.levels + 1):
            for _, _, f in members:
                off, size, _ = f["pieces"][k]
                if end is not None:
                    assert off == end
                end = off + size


def test_checksums_catch_a_flipped_byte(imagenet_tree, tmp_path):
    store = pack(imagenet_tree, str(tmp_path / "s"), "--record-bytes", "1MiB")
    st = fidstore.Store(store)
    victim = sorted(st.files)[0]
    off, size, _ = st.files[victim]["pieces"][3]
    path = os.path.join(store, st.records[st.files[victim]["record"]][0])
    with open(path, "r+b") as f:
        f.seek(off + size // 2)
        b = f.read(1)
        f.seek(off + size // 2)
        f.write(bytes([b[0] ^ 0x55]))
    p = run("verify", store, "--progress", "off", check=False)
    assert p.returncode == 1
    bad = [l for l in p.stderr.splitlines() if l.startswith("BAD ")]
    assert len(bad) == 1 and victim in bad[0], p.stderr


def test_refuses_existing_store_and_bad_source(edge_store, tmp_path):
    p = run("pack", str(tmp_path / "missing"), str(tmp_path / "x"), check=False)
    assert p.returncode == 2 and "missing" in p.stderr
    p = run("pack", str(tmp_path), edge_store, check=False)
    assert p.returncode == 2 and edge_store in p.stderr
    assert not os.path.exists(tmp_path / "x")


def test_store_into_empty_folder_and_empty_source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "store").mkdir()
    pack(str(src), str(tmp_path / "store"))
    info = json.loads(run("inspect", str(tmp_path / "store"), "--json").stdout)
    assert info["files"] == 0 and info["records"] == 0
    assert run("verify", str(tmp_path / "store")).returncode == 0


def test_a_huge_record_target_costs_only_what_the_files_take(edge_tree, tmp_path):
    """--record-bytes larger than the machine's memory, file layout: one record of what there is
    (no memory is reserved for the target up front)."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(os.path.join(edge_tree, "jpeg", "rgb420.jpg"), src / "one.jpg")
    store = str(tmp_path / "store")
    pack(str(src), store, "--record-bytes", "30G", "--layout", "file")
    info = json.loads(run("inspect", store, "--json").stdout)
    assert info["files"] == 1 and info["records"] == 1
    assert "0 bad" in run("verify", store, "--progress", "off").stdout


def test_interrupted_pack_leaves_nothing(imagenet_tree, tmp_path):
    store = tmp_path / "s"
    proc = subprocess.Popen([fid_bin(), "pack", imagenet_tree, str(store), "--jobs", "1", "--progress", "off",
                             "--record-bytes", "64KiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Wait until the packer has started writing records, then interrupt it.
    while proc.poll() is None and not any(n.startswith(".s.tmp") for n in os.listdir(tmp_path)):
        pass
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("pack finished before the signal arrived")
    assert proc.returncode == 1 and b"interrupted" in err
    assert os.listdir(tmp_path) == [], "a half store was left behind"
    pack(imagenet_tree, str(store))  # a rerun succeeds
    assert os.path.exists(store / "index.sqlite")


def one_line(stderr):
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_full_disk_leaves_nothing_and_a_rerun_succeeds(imagenet_tree, imagenet_store, tmp_path):
    """ENOSPC on a record, then on the index: exit 1 naming the file and the cause, nothing left
    behind, the source untouched; with room, the same command packs the reference store."""
    ref = fidstore.Store(imagenet_store)
    page = 4096
    record_pages = sum(-(-size // page) for _, _, size in ref.records.values())
    spare = 4 * page  # what is left once every record is written: less than the index needs
    assert os.path.getsize(os.path.join(imagenet_store, "index.sqlite")) > 2 * spare
    before = tree_digest(imagenet_tree)
    args = ("--progress", "off", "--record-bytes", "1MiB", "--jobs", "2", "--layout", "scan")  # as imagenet_store
    with tmpfs(str(tmp_path / "small"), "2m") as fs:
        store = os.path.join(fs, "store")
        p = run("pack", imagenet_tree, store, *args, check=False)
        line = one_line(p.stderr)
        assert p.returncode == 1 and "No space left on device" in line, p.stderr
        assert re.search(r"/records/\d{6}\.rec: ", line), line
        assert os.listdir(fs) == [], "a full disk left a half store"

        remount_tmpfs(fs, record_pages * page + spare)
        p = run("pack", imagenet_tree, store, *args, check=False)
        line = one_line(p.stderr)
        # The index's rows (the scratch table, docs/FORMAT.md "Atomicity") or the index itself.
        assert p.returncode == 1 and "No space left on device" in line, p.stderr
        assert re.search(r"/index\.(scratch|sqlite\.partial): ", line), line
        assert os.listdir(fs) == [], "a full disk left a half store"
        p = run("verify", store, "--progress", "off", check=False)
        assert p.returncode == 1 and store in one_line(p.stderr)

        remount_tmpfs(fs, "64m")
        run("pack", imagenet_tree, store, *args)
        assert os.listdir(fs) == ["store"]
        assert "0 bad" in run("verify", store, "--progress", "off").stdout
        recs = sorted(os.listdir(os.path.join(store, "records")))
        assert recs == sorted(os.path.basename(p) for p, _, _ in ref.records.values())
        for r in recs:  # the same bytes as the reference store packed on a roomy disk
            with open(os.path.join(store, "records", r), "rb") as a, \
                    open(os.path.join(imagenet_store, "records", r), "rb") as b:
                assert a.read() == b.read(), r
    assert tree_digest(imagenet_tree) == before


def wait_for_files(done, folders, proc, seconds):
    """Waits until done() holds, waking on inotify events of `folders` (each watched once it
    exists) or on proc's exit; True if done() held within `seconds`."""
    libc = ctypes.CDLL(None, use_errno=True)
    ino = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert ino >= 0, os.strerror(ctypes.get_errno())
    exited = os.pidfd_open(proc.pid)
    changes = 0x100 | 0x80 | 0x8  # IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE
    deadline = time.monotonic() + seconds
    try:
        while True:
            for folder in folders:  # watched before done() looks, so no change is missed
                if os.path.isdir(folder):
                    libc.inotify_add_watch(ino, os.fsencode(folder), changes)
            if done():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready = select.select([ino, exited], [], [], left)[0]
            if exited in ready:
                return done()
            if ino in ready:
                os.read(ino, 1 << 16)
    finally:
        os.close(ino)
        os.close(exited)


def test_killed_pack_is_refused_then_replaced(imagenet_tree, imagenet_store, tmp_path, mnt):
    """SIGKILL mid-pack: nothing cleans up, so what is left must not pass for a store (verify and
    mount refuse it, one line, exit 1; with the target absent, every command names the leftover),
    a second pack beside a running one refuses, and a rerun replaces the leftover. The source is
    untouched."""
    before = tree_digest(imagenet_tree)
    work = tmp_path / "w"
    store = work / "s"
    store.mkdir(parents=True)  # an empty target folder made by the user
    proc = subprocess.Popen([fid_bin(), "pack", imagenet_tree, str(store), "--jobs", "1", "--progress", "off",
                             "--record-bytes", "64KiB"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    leftover = work / f".s.tmp-{proc.pid}"
    try:
        assert wait_for_files(lambda: (leftover / "records").is_dir() and len(os.listdir(leftover / "records")) >= 2,
                              [work, leftover, leftover / "records"], proc, 60), "pack wrote no two records in 60 s"
        assert proc.poll() is None, "pack ended before it wrote two records"
        proc.send_signal(signal.SIGSTOP)  # frozen mid-pack, its folder locked
        p = run("pack", imagenet_tree, str(store), "--progress", "off", check=False)
        assert p.returncode == 1, p.stderr
        assert "another fidelityfs pack" in p.stderr and f"pid {proc.pid}" in one_line(p.stderr)
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sorted(os.listdir(work)) == sorted([leftover.name, "s"]) and os.listdir(store) == []
    assert not (leftover / "index.sqlite").exists()
    for target in (store, leftover):
        p = run("verify", target, "--progress", "off", check=False)
        line = one_line(p.stderr)
        assert p.returncode == 1 and "not a fidelityfs store" in line and "pack again" in line, p.stderr
        p = mount(str(target), mnt, check=False)
        line = one_line(p.stderr)
        assert p.returncode == 1 and "not a fidelityfs store" in line and "pack again" in line, p.stderr
        assert not is_mounted(mnt)
    store.rmdir()  # an absent target: every command that meets it names the leftover beside it
    for cmd in (("verify", store), ("inspect", store), ("relayout", store, work / "o", "--layout", "scan")):
        p = run(*cmd, check=False)
        line = one_line(p.stderr)
        assert p.returncode == 1 and f"{store}: no such store; " in line and str(leftover) in line, (cmd, p.stderr)
    p = mount(str(store), mnt, check=False)
    assert p.returncode == 2 and str(leftover) in one_line(p.stderr) and "pack again" in p.stderr, p.stderr
    assert tree_digest(imagenet_tree) == before

    pack(imagenet_tree, str(store), "--jobs", "2", "--record-bytes", "64KiB")
    assert sorted(os.listdir(work)) == ["s"], "the killed pack's folder was not replaced"
    assert "0 bad" in run("verify", store, "--progress", "off").stdout
    ref, st = fidstore.Store(imagenet_store), fidstore.Store(str(store))
    assert sorted(st.files) == sorted(ref.files)
    for rel in sorted(ref.files)[::25]:
        assert st.read(rel, 3) == ref.read(rel, 3) and st.read(rel) == ref.read(rel), rel
    assert tree_digest(imagenet_tree) == before


def test_imagenet_store_verifies(imagenet_tree, imagenet_store):
    p = run("verify", imagenet_store, "--progress", "off")
    assert "0 bad" in p.stdout
    st = fidstore.Store(imagenet_store)
    jpegs = [r for r in st.files if r.endswith(".JPEG")]
    assert len(jpegs) == sum(len(fs) for _, _, fs in os.walk(imagenet_tree))
    for rel in jpegs[:20]:
        src = open(os.path.join(imagenet_tree, rel), "rb").read()
        assert pixels(st.read(rel))[1].tobytes() == pixels(src)[1].tobytes(), rel


def test_fast_levels(edge_tree, tmp_path, mnt):
    """`pack --levels fast`: every JPEG gets a fast script, each level is a clean JPEG, the full level
    has the source's pixels, and a mount serves the same bytes."""
    store = pack(edge_tree, str(tmp_path / "fast"), "--levels", "Fast")  # keywords in any case
    info = json.loads(run("inspect", store, "--json").stdout)
    assert set(info["jpeg_scripts"]) <= {"ycbcr_fast", "generic_fast"}, info["jpeg_scripts"]
    assert sum(info["jpeg_scripts"].values()) == info["by_kind"]["jpeg"] > 0
    st = fidstore.Store(store)
    progressive = [r["path"] for r in manifest(edge_tree) if r["expectation"] == "progressive"]
    assert progressive
    for rel in progressive:
        source_bytes = open(os.path.join(edge_tree, rel), "rb").read()
        assert st.files[rel]["kind"] == "jpeg", rel
        assert pixels(st.read(rel))[1].tobytes() == pixels(source_bytes)[1].tobytes(), f"{rel}: full level differs"
        sizes = [len(st.read(rel, k)) for k in range(1, st.levels + 1)]
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), f"{rel}: level sizes {sizes}"
        for k in (1, 5, st.levels):
            ok, err = djpeg_clean(st.read(rel, k))
            assert ok, f"{rel} level {k}: {err}"
    mount(store, mnt, "-o", "scan_group=5")
    for rel in progressive:
        with open(os.path.join(mnt, rel), "rb") as f:
            assert f.read() == st.read(rel, 5), rel
    p = run("pack", edge_tree, str(tmp_path / "bad"), "--levels", "slow", check=False)
    assert p.returncode == 2 and "--levels" in p.stderr and "slow" in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "bad")


def test_seeds_take_the_whole_u64_range_and_nothing_else(tmp_path):
    """--seed is any whole number from 0 to 2^64 - 1, kept exactly and read back by inspect and
    mount; a sign, an overflow or text is a usage error naming the value, and writes nothing."""
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "x.bin").write_bytes(b"x" * 100)
    for seed in ("0", "9223372036854775808", "18446744073709551615"):
        store = str(tmp_path / f"s{seed}")
        pack(str(tmp_path / "src"), store, "--seed", seed)
        assert json.loads(run("inspect", store, "--json").stdout)["seed"] == int(seed)
        assert "0 bad" in run("verify", store, "--progress", "off").stdout
    for seed in ("-1", "18446744073709551616", "+5", "0x10", ""):
        store = str(tmp_path / "bad")
        p = run("pack", str(tmp_path / "src"), store, "--seed", seed, "--progress", "off", check=False)
        assert p.returncode == 2, (seed, p.stderr)
        assert f"'{seed}': expected a whole number from 0 to 18446744073709551615" in p.stderr, p.stderr
        assert not os.path.exists(store)


def test_skips_fail_the_pack_and_every_skip_and_blob_has_a_reason(imagenet_tree, tmp_path):
    """An entry pack cannot store (a FIFO, a symbolic link loop) makes it exit 1 unless
    --allow-skipped, the store written with the rest; every skipped entry and every blob (an empty
    .jpg, a text file, a .jpg that is no JPEG) has a reason, printed by pack and by inspect."""
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    jpeg = next(os.path.join(d, f) for d, _, fs in os.walk(imagenet_tree) for f in sorted(fs) if f.endswith(".JPEG"))
    with open(jpeg, "rb") as f:
        (src / "good.jpg").write_bytes(f.read())
    (src / "empty.jpg").write_bytes(b"")
    (src / "notes.txt").write_text("labels\n")
    (src / "fake.jpg").write_bytes(b"GIF89a not a jpeg")
    os.mkfifo(src / "pipe.jpg")
    os.symlink("loop", src / "loop")
    store = str(tmp_path / "store")
    p = run("pack", str(tmp_path / "src"), store, "--progress", "off", check=False)
    assert p.returncode == 1 and "2 source entries were skipped" in p.stderr, (p.returncode, p.stderr)
    blob_lines = {l for l in p.stdout.splitlines() if l.startswith("blob: ")}
    skip_lines = {l for l in p.stdout.splitlines() if l.startswith("skipped: ")}
    assert "blob: a/empty.jpg: empty file" in blob_lines, p.stdout
    assert {l.split(": ")[1] for l in blob_lines} == {"a/empty.jpg", "a/notes.txt", "a/fake.jpg"}, p.stdout
    assert all(len(l.split(": ", 2)[2]) > 5 for l in blob_lines | skip_lines), p.stdout
    assert {l.split(": ")[1] for l in skip_lines} == {"a/pipe.jpg", "a/loop"}, p.stdout
    assert "0 bad" in run("verify", store, "--progress", "off").stdout  # the rest is a whole store
    shown = run("inspect", store).stdout
    assert blob_lines | skip_lines <= set(shown.splitlines()), shown
    info = json.loads(run("inspect", store, "--json").stdout)
    assert info["blob_count"] == 3 and info["skipped_count"] == 2
    assert {b["path"]: b["reason"] for b in info["blobs"]}["a/empty.jpg"] == "empty file"
    assert {s["path"] for s in info["skipped"]} == {"a/pipe.jpg", "a/loop"}
    assert all(s["reason"] for s in info["skipped"])
    p = run("pack", str(tmp_path / "src"), str(tmp_path / "accepted"), "--progress", "off", "--allow-skipped")
    assert p.returncode == 0 and "skipped: a/pipe.jpg" in p.stdout


def test_usage_errors_say_what_is_allowed_in_words(tmp_path):
    """CLI11's stock texts (ranges of doubles, {a,b} sets, unit tables) never reach the user: each
    usage error names the command and what it accepts, and exits 2."""
    src, store = str(tmp_path / "src"), str(tmp_path / "store")
    cases = [
        ((), "fidelityfs: a command is required: pack, merge, relayout, inspect, verify, quality, mount, l3, "
             "stats"),
        (("bogus",), "fidelityfs: 'bogus' is not a command (commands: pack, merge, relayout, inspect, verify, "
                     "quality, mount, l3, stats)"),
        (("pack", "--jobs", "0", src, store), "fidelityfs pack: --jobs: must be a whole number from 1 to 1024, got '0'"),
        (("pack", "--levels", "best", src, store), "fidelityfs pack: --levels: 'best' is not one of: pcr, fast"),
        (("pack", "--record-bytes", "12x", src, store),
         "fidelityfs pack: --record-bytes: '12x' is not a size: a number of bytes, or one with a unit (64M, 1G, 512KiB)"),
        (("merge", store), "fidelityfs merge: PART... STORE: needs at least 2 arguments, got 1"),
        (("inspect", store, "--bogus"), "fidelityfs inspect: unknown option '--bogus'"),
        (("inspect", store, "extra"), "fidelityfs inspect: unexpected argument 'extra'"),
        (("relayout", store, src, "--layout", "rows"), "fidelityfs relayout: --layout: 'rows' is not one of: scan, file"),
    ]
    for args, first in cases:
        p = run(*args, check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.splitlines()[0] == first, (args, p.stderr)
        assert "CLI" not in p.stderr and "{" not in p.stderr
    # Keywords in any case become the keyword.
    os.mkdir(src)
    p = run("pack", src, store, "--levels", "FAST", "--layout", "Scan", "--progress", "OFF", check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(run("inspect", store, "--json").stdout)["layout"] == "scan"
