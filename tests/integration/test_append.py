"""pack --append: a source's new files added to a store as new records and a new index, the
store's records untouched, a mount opened before it serving its index, and a killed append
leaving the store as it was (docs/FORMAT.md "Appended stores")."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from PIL import Image

from conftest import fid_bin, pack, run, wait_stopped
from fidstore import Store
from mountutil import mounted, read_all, walk_files

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from make_tree import photo_like  # noqa: E402


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def record_digests(store):
    d = os.path.join(store, "records")
    return {n: digest(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def append(src, store, *extra, env=None, check=True):
    p = subprocess.run([fid_bin(), "pack", "--append", str(src), str(store), "--progress", "off", *extra],
                       capture_output=True, text=True, env=env)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_append_writes_only_new_records_and_a_mount_before_it_keeps_reading(append_trees, tmp_path):
    old, new, both = append_trees
    store = pack(str(old), str(tmp_path / "store"), "--record-bytes", "256KiB")
    records_before = record_digests(store)
    mnt_old, mnt_new = str(tmp_path / "m_old"), str(tmp_path / "m_new")
    with mounted(store, mnt_old, "-o", "scan_group=4"):
        old_rels = walk_files(mnt_old)
        want_old = read_all(mnt_old, old_rels)
        # Held between two of its records' moves, then let go: the mount reads right meanwhile.
        proc = subprocess.Popen([fid_bin(), "pack", "--append", str(new), store, "--progress", "off"],
                                env=dict(os.environ, FIDELITYFS_APPEND_STOP="between-records"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_stopped(proc)
            assert read_all(mnt_old, old_rels) == want_old
        finally:
            proc.send_signal(signal.SIGCONT)
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "appended to" in out and f"files {len(old_rels)} -> " in out, out
        # The mount opened before reads every file as before, after the append, and after a new
        # mount of the appended store made its tables file anew.
        assert read_all(mnt_old, old_rels) == want_old
        with mounted(store, mnt_new, "-o", "scan_group=4"):
            rels = walk_files(mnt_new)
            got = read_all(mnt_new, rels)
        assert read_all(mnt_old, old_rels) == want_old
        assert walk_files(mnt_old) == old_rels
    after = record_digests(store)
    assert {n: after[n] for n in records_before} == records_before  # no record rewritten
    added = sorted(set(after) - set(records_before))
    assert added and added[0] == f"{len(records_before):06d}.rec", added
    written = sum(os.path.getsize(os.path.join(store, "records", n)) for n in added)
    assert f"wrote {(written + os.path.getsize(os.path.join(store, 'index.sqlite'))) / 1e6:.1f} MB" in out, out

    fresh = pack(str(both), str(tmp_path / "fresh"), "--record-bytes", "256KiB")
    with mounted(fresh, str(tmp_path / "m_fresh"), "-o", "scan_group=4") as m:
        assert walk_files(m) == rels  # the same tree as a pack of both
        want = read_all(m, rels)
    assert got == want  # old files as before, new ones as a fresh pack has them
    assert {r: got[r] for r in old_rels} == want_old

    s = Store(store)
    s.check_headers()
    assert s.meta["appends"] == "1"
    assert sorted(s.files) == sorted(Store(fresh).files)
    for rel in rels[::7]:
        assert s.read(rel) == Store(fresh).read(rel), rel
    v = run("verify", store)
    assert f"verified {len(rels)} files, 0 bad" in v.stdout and "interrupted append" not in v.stdout


def test_append_refuses_paths_the_store_has_options_it_does_not_and_a_second_append(append_trees, tmp_path):
    old, new, _ = append_trees
    store = pack(str(old), str(tmp_path / "store"), "--record-bytes", "256KiB")
    index_before = digest(os.path.join(store, "index.sqlite"))
    p = append(old, store, check=False)
    assert p.returncode == 1 and "of the source are in the store already" in p.stderr, p.stderr
    p = append(new, store, "--levels", "fast", check=False)
    assert p.returncode == 2 and "the store has level_scripts pcr, not fast" in p.stderr, p.stderr
    p = append(new, store, "--record-bytes", "1MiB", check=False)
    assert p.returncode == 2 and "record_bytes 262144, not 1048576" in p.stderr, p.stderr
    p = append(new, tmp_path / "nothing", check=False)
    assert p.returncode == 1 and "pack --append adds to a store that exists" in p.stderr, p.stderr
    assert digest(os.path.join(store, "index.sqlite")) == index_before
    assert os.listdir(store) == ["index.sqlite", "records"] or sorted(os.listdir(store)) == ["index.sqlite", "records"]

    # While one append runs (held at a phase), a second one is refused.
    held = subprocess.Popen([fid_bin(), "pack", "--append", str(new), store, "--progress", "off"],
                            env=dict(os.environ, FIDELITYFS_APPEND_STOP="records"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_stopped(held)
        p = append(new, store, check=False)
        assert p.returncode == 1 and "another fidelityfs append is writing this store" in p.stderr, p.stderr
    finally:
        held.kill()
        held.wait()


@pytest.mark.parametrize("phase", ["records", "between-records", "index"])
def test_a_killed_append_leaves_the_store_as_it_was(append_trees, tmp_path, phase):
    """Killed before its records move into the store, between two of them, and with the new
    index written but not yet in place: the store mounts and verifies as before, verify and
    inspect name what was left, and the next append removes it and succeeds."""
    old, new, _ = append_trees
    store = pack(str(old), str(tmp_path / "store"), "--record-bytes", "128KiB")
    index_before = digest(os.path.join(store, "index.sqlite"))
    records_before = record_digests(store)
    with mounted(store, str(tmp_path / "m0")) as m:
        rels = walk_files(m)
        want = read_all(m, rels)
    proc = subprocess.Popen([fid_bin(), "pack", "--append", str(new), store, "--progress", "off"],
                            env=dict(os.environ, FIDELITYFS_APPEND_STOP=phase),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_stopped(proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert digest(os.path.join(store, "index.sqlite")) == index_before
    assert {n: d for n, d in record_digests(store).items() if n in records_before} == records_before
    with mounted(store, str(tmp_path / "m1")) as m:
        assert walk_files(m) == rels
        assert read_all(m, rels) == want
    v = run("verify", store)
    assert f"verified {len(rels)} files, 0 bad" in v.stdout, v.stdout
    left = [line for line in v.stdout.splitlines() if "interrupted append" in line]
    assert left, v.stdout
    if phase != "records":
        assert any(f"records/{len(records_before):06d}.rec" in line for line in left), left
    if phase == "index":
        assert any(line.endswith("index.sqlite.partial") for line in left), left
    assert "interrupted append" in run("inspect", store).stdout
    append(new, store)
    v = run("verify", store)
    assert "interrupted append" not in v.stdout and ", 0 bad" in v.stdout, v.stdout
    assert sorted(os.listdir(store)) == ["index.sqlite", "records"]


def test_append_adds_whole_clips_and_refuses_frames_for_a_clip_of_the_store(tmp_path):
    """A new clip folder is appended as a clip (its frames together in the new records); frames
    for a clip the store has are refused, since a clip's frames lie together."""
    import random
    rng = random.Random(11)
    frames = [photo_like(rng, 64, 48) for _ in range(6)]

    def clip(root, name, numbers):
        d = root / "videos" / name
        d.mkdir(parents=True)
        for n in numbers:
            frames[n % len(frames)].save(d / f"img_{n:05d}.jpg", quality=90)

    old, new, more = tmp_path / "old", tmp_path / "new", tmp_path / "more"
    clip(old, "a", range(1, 5))
    clip(new, "b", range(1, 5))
    clip(more, "a", [5])
    store = pack(str(old), str(tmp_path / "store"))
    append(new, store)
    s = Store(store)
    assert {s.dir_path(c["dir"]) for c in s.clips} == {"videos/a", "videos/b"}
    b_runs = [c for c in s.clips if s.dir_path(c["dir"]) == "videos/b"]
    assert b_runs[0]["record"] >= min(c["record"] for c in s.clips if s.dir_path(c["dir"]) == "videos/a") + 1
    with mounted(store, str(tmp_path / "m")) as m:
        assert sorted(os.listdir(os.path.join(m, "videos", "b"))) == [f"img_{n:05d}.jpg" for n in range(1, 5)]
        assert read_all(m, walk_files(m))  # every frame reads
    assert ", 0 bad" in run("verify", store).stdout
    p = append(more, store, check=False)
    assert p.returncode == 1 and "adds files to a clip folder of the store (videos/a/img_00005.jpg)" in p.stderr, p.stderr
    # Nor does --replace replace a clip's frame: the clip's frames lie by level in its run.
    clip(tmp_path / "frame", "a", [2])
    p = append(tmp_path / "frame", store, "--replace", check=False)
    assert p.returncode == 1 and "videos/a/img_00002.jpg" in p.stderr and "outside clip folders" in p.stderr, p.stderr


def test_append_replace_serves_the_new_files_and_counts_the_old_bytes_until_a_relayout(append_trees, tmp_path):
    """--replace: the source's files at paths the store has replace them. A mount opened before
    keeps the old bytes; a new one serves the new; the old bytes stay in their records,
    unreferenced, counted by inspect (and carried by the next append) until a relayout drops them."""
    old, _, _ = append_trees
    store = pack(str(old), str(tmp_path / "store"), "--record-bytes", "128KiB")
    before = Store(store)
    rels = sorted(before.files)
    # Three files take other files' bytes (JPEGs, and a blob where the tree has one), one is new.
    jpegs = [r for r in rels if before.files[r]["kind"] == "jpeg"]
    swaps = {jpegs[0]: jpegs[-1], jpegs[len(jpegs) // 2]: jpegs[1], jpegs[-1]: jpegs[0]}
    upd = tmp_path / "upd"
    for rel, like in swaps.items():
        (upd / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(old / like, upd / rel)
    photo_like(__import__("random").Random(3), 80, 60).save(upd / os.path.dirname(jpegs[0]) / "added.jpg", quality=88)
    old_bytes = sum(size for rel in swaps for _, size, _ in before.files[rel]["pieces"])
    records_before = record_digests(store)
    with mounted(store, str(tmp_path / "m_old")) as mnt_old:
        want_old = read_all(mnt_old, rels)
        p = append(upd, store, "--replace")
        assert f"files {len(rels)} -> {len(rels) + 1} (3 replaced)" in p.stdout, p.stdout
        assert read_all(mnt_old, rels) == want_old  # the mount opened before serves what it opened
        with mounted(store, str(tmp_path / "m_new")) as m:
            new_rels = walk_files(m)
            got = read_all(m, new_rels)
    assert {n: d for n, d in record_digests(store).items() if n in records_before} == records_before
    assert sorted(new_rels) == sorted(rels + [os.path.dirname(jpegs[0]) + "/added.jpg"])
    for rel in rels:
        assert got[rel] == want_old[swaps.get(rel, rel)], rel  # a replaced file reads as its new bytes' pack
    s = Store(store)
    assert s.version == 6 and s.unreferenced_bytes() == old_bytes
    for rel in rels[::5] + list(swaps):
        assert s.read(rel) == before.read(swaps.get(rel, rel)), rel
    info = json.loads(run("inspect", "--json", store).stdout)
    assert info["unreferenced_bytes"] == old_bytes and info["files"] == len(rels) + 1, info
    assert f"unreferenced    {old_bytes} bytes" in run("inspect", store).stdout
    assert f"verified {len(rels) + 1} files, 0 bad" in run("verify", store).stdout

    # Replaced again: the earlier rows are carried, the new one added.
    again = tmp_path / "again"
    (again / jpegs[0]).parent.mkdir(parents=True)
    shutil.copy(old / jpegs[1], again / jpegs[0])
    append(again, store, "--replace")
    s = Store(store)
    assert s.unreferenced_bytes() == old_bytes + sum(size for _, size, _ in before.files[jpegs[-1]]["pieces"])
    with mounted(store, str(tmp_path / "m_again")) as m:
        got = read_all(m, new_rels)
    assert got[jpegs[0]] == want_old[jpegs[1]]

    # A relayout leaves the unreferenced bytes behind.
    out = str(tmp_path / "relaid")
    run("relayout", store, out, "--layout", "scan")
    info = json.loads(run("inspect", "--json", out).stdout)
    assert info["unreferenced_bytes"] == 0 and info["format_version"] == 3, info
    assert Store(out).unreferenced == [] and "unreferenced" not in run("inspect", out).stdout
    with mounted(out, str(tmp_path / "m_relaid")) as m:
        assert read_all(m, new_rels) == got
    assert f"verified {len(rels) + 1} files, 0 bad" in run("verify", out).stdout
