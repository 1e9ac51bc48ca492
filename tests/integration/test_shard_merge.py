"""pack --shard I/N and merge: the parts of a source merge into the store a single pack makes (same
files, folders and bytes through real mounts); bad sets of parts are refused and leave no store."""
import json
import os
import shutil
import subprocess

import pytest

import fidstore
from conftest import fid_bin, index_meta, index_rows, pack, run
from mountutil import mounted, walk_files

SEED = "7"


def pack_part(src, parts_dir, i, n, *extra):
    os.makedirs(parts_dir, exist_ok=True)
    return pack(src, os.path.join(parts_dir, f"part{i}"), "--shard", f"{i}/{n}", "--seed", SEED,
                "--record-bytes", "1MiB", *extra)


@pytest.fixture(scope="module")
def stores(imagenet_tree, tmp_path_factory):
    """The single pack, the three parts and their merge (all on one filesystem)."""
    root = tmp_path_factory.mktemp("shards")
    single = pack(imagenet_tree, str(root / "single"), "--seed", SEED, "--record-bytes", "1MiB")
    parts = [pack_part(imagenet_tree, str(root), i, 3) for i in range(3)]
    merged = str(root / "merged")
    run("merge", *parts, merged)
    return dict(root=root, single=single, parts=parts, merged=merged)


FILES = "SELECT id, dir, name, kind, source_size, pieces FROM files ORDER BY id"
DIRS = "SELECT id, parent, name, mtime_ns FROM dirs ORDER BY id"


def test_parts_split_the_files_and_keep_every_folder(stores):
    single_files = index_rows(stores["single"], FILES)
    counts = [len(index_rows(p, FILES)) for p in stores["parts"]]
    assert sum(counts) == len(single_files) and all(c > 0 for c in counts), counts
    for i, p in enumerate(stores["parts"]):
        m = index_meta(p)
        assert m["shard"] == f"{i}/3"
        assert m["source_digest"] == index_meta(stores["single"])["source_digest"]
        assert index_rows(p, DIRS) == index_rows(stores["single"], DIRS)
    m = index_meta(stores["single"])
    assert m["shard"] == "0/1" and m["level_scripts"] == "pcr"
    assert m["layout"] == "file" and m["format_version"] == "4"  # pack's default layout
    assert len(m["source_digest"]) == 16


def test_inspect_shows_where_a_store_came_from(stores):
    part = json.loads(run("inspect", stores["parts"][1], "--json").stdout)
    single = index_meta(stores["single"])
    assert (part["shard"], part["source_digest"], part["level_scripts"], part["seed"]) == \
        ("1/3", single["source_digest"], "pcr", int(SEED))
    text = run("inspect", stores["merged"]).stdout
    assert f"shard 0/1, source digest {single['source_digest']}, levels pcr, seed {SEED}" in text


def test_merged_index_equals_single_pack(stores):
    single, merged = stores["single"], stores["merged"]
    assert index_rows(merged, FILES) == index_rows(single, FILES)
    assert index_rows(merged, DIRS) == index_rows(single, DIRS)
    m, s = index_meta(merged), index_meta(single)
    for key in ("shard", "source_digest", "seed", "levels", "level_scripts", "format_version", "record_bytes"):
        assert m[key] == s[key], key
    # Records are the parts' files, linked: same inodes, headers keeping the parts' ids.
    part_inodes = {os.stat(os.path.join(p, path)).st_ino
                   for p in stores["parts"] for (path,) in index_rows(p, "SELECT path FROM records")}
    merged_paths = [path for (path,) in index_rows(merged, "SELECT path FROM records ORDER BY id")]
    assert merged_paths == [f"records/{i:06d}.rec" for i in range(len(merged_paths))]
    assert {os.stat(os.path.join(merged, p)).st_ino for p in merged_paths} == part_inodes
    st, ref = fidstore.Store(merged), fidstore.Store(single)
    st.check_headers()
    ref.check_headers()
    assert st.files.keys() == ref.files.keys()
    for rel in ref.files:
        assert st.all_levels(rel) == ref.all_levels(rel), rel


@pytest.mark.parametrize("options", [(), ("-o", "scan_group=2")])
def test_merged_store_serves_the_single_packs_bytes(stores, mnt, tmp_path, options):
    other = str(tmp_path / "mnt2")
    os.makedirs(other)
    with mounted(stores["single"], mnt, *options), mounted(stores["merged"], other, *options):
        rels = walk_files(mnt)
        assert rels == walk_files(other) and len(rels) > 100
        for rel in rels:
            with open(os.path.join(mnt, rel), "rb") as a, open(os.path.join(other, rel), "rb") as b:
                assert a.read() == b.read(), rel


def test_verify_passes_on_merged_and_parts(stores):
    run("verify", stores["merged"])
    run("verify", stores["parts"][1])


def refused(root, parts, *names):
    target = os.path.join(root, "bad")
    p = run("merge", *parts, target, check=False)
    assert p.returncode == 1, p.stderr
    for name in names:
        assert name in p.stderr, (name, p.stderr)
    assert not os.path.exists(target)
    assert not [n for n in os.listdir(root) if n.startswith(".bad.tmp")]
    return p.stderr


def test_bad_merges_are_refused(stores, imagenet_tree, tmp_path):
    root, (p0, p1, p2) = str(tmp_path), stores["parts"]
    assert "shard 2 of 3 missing" in refused(root, [p0, p1], p0, p1)
    assert "both are shard 1/3" in refused(root, [p0, p1, p1, p2], p1)
    other_src = str(tmp_path / "other")
    shutil.copytree(imagenet_tree, other_src)
    victim = next(os.path.join(d, f) for d, _, fs in sorted(os.walk(other_src)) for f in sorted(fs))
    os.unlink(victim)
    other = pack_part(other_src, str(tmp_path / "o"), 2, 3)
    assert "source_digest" in refused(root, [p0, p1, other], p0, other)
    fast = pack_part(imagenet_tree, str(tmp_path / "f"), 2, 3, "--levels", "fast")
    assert "level_scripts" in refused(root, [p0, p1, fast], p0, fast)
    reseeded = pack(imagenet_tree, str(tmp_path / "s"), "--shard", "2/3", "--seed", "8", "--record-bytes", "1MiB")
    assert "seed" in refused(root, [p0, p1, reseeded], p0, reseeded)
    not_store = str(tmp_path / "empty")
    os.makedirs(not_store)
    assert "not a fidelityfs store" in refused(root, [p0, p1, not_store], not_store)
    assert "shard 0/1" in refused(root, [p0, p1, p2, stores["merged"]], stores["merged"])


@pytest.mark.parametrize("spec", ["3/2", "0/0", "x/2", "1/", "2"])
def test_bad_shard_spec_is_a_usage_error(imagenet_tree, tmp_path, spec):
    store = str(tmp_path / "s")
    p = run("pack", imagenet_tree, store, "--shard", spec, check=False)
    assert p.returncode == 2, p.stderr
    assert f"'{spec}'" in p.stderr
    assert not os.path.exists(store)


def test_merge_target_must_be_empty(stores):
    p = run("merge", *stores["parts"], stores["single"], check=False)
    assert p.returncode == 2 and "already exists" in p.stderr


@pytest.mark.skipif(shutil.which("parallel") is None, reason="GNU parallel is not installed")
def test_gnu_parallel_line(stores, imagenet_tree, tmp_path):
    """The README's line: three parts packed at once, then merged."""
    env = dict(os.environ, PATH=os.path.dirname(fid_bin()) + os.pathsep + os.environ["PATH"])
    line = (f"mkdir -p parts && parallel fidelityfs pack {imagenet_tree} parts/{{}} --shard {{}}/3 --seed {SEED} --progress off "
            f"::: 0 1 2 && fidelityfs merge parts/* STORE")
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, check=True, capture_output=True)
    store = str(tmp_path / "STORE")
    assert index_rows(store, FILES) == index_rows(stores["single"], FILES)
    run("verify", store)


def test_parts_of_a_compressed_tar_merge_into_the_folder_packs_files(stores, imagenet_tree, tmp_path):
    """A streamed source (.tar.gz) decompresses every member's header but reads only its part's
    files; the parts merge into the files of the folder's single pack."""
    tar = str(tmp_path / "imagenet.tar.gz")
    subprocess.run(["tar", "-czf", tar, "-C", imagenet_tree, "."], check=True)
    parts = [pack_part(tar, str(tmp_path / "parts"), i, 3) for i in range(3)]
    merged = str(tmp_path / "merged")
    run("merge", *parts, merged)
    assert index_rows(merged, FILES) == index_rows(stores["single"], FILES)
    run("verify", merged)
