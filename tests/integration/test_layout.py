"""The two record layouts (docs/FORMAT.md "Record files"): `pack --layout scan|file` of one source
and seed serve the same bytes at every level through real mounts (local, RGW s3://, nginx http://),
equal to fidstore.py's read of each store; a damaged piece of a file record fails only the reads
that need it; `relayout` turns either store into the other's very records (from a folder or
http://, to a folder or s3://), and an interrupted or refused one leaves nothing; bad layouts are
usage errors and parts of different layouts do not merge."""
import errno
import json
import os
import shutil
import signal
import subprocess
from types import SimpleNamespace

import pytest

import remote_servers
from remote_servers import aws
from conftest import fid_bin, index_meta, index_rows, pack, run
from fidstore import Store
from mountutil import XA, mounted, wait_invalidations, walk_files
from mountutil import read_file as read

SEED = "11"
RECORD_BYTES = "256KiB"  # several records, most JPEG ones holding several files
BUCKET = "fid-layout"


def pack_pair(src, root, *extra):
    """The scan and the file pack of src, same seed and record size."""
    return [pack(src, os.path.join(root, layout), "--layout", layout, "--seed", SEED, "--record-bytes", RECORD_BYTES,
                 *extra) for layout in ("scan", "file")]


@pytest.fixture(scope="module")
def pair(edge_tree, imagenet_tree, tmp_path_factory):
    """One source, the edge zoo and 40 files of the ImageNet-like set (10 in each of 4 classes, taken
    from the session's tree), packed in both layouts."""
    root = str(tmp_path_factory.mktemp("layout"))
    src = os.path.join(root, "src")
    shutil.copytree(edge_tree, os.path.join(src, "edge"), symlinks=True)
    small = os.path.join(root, "small")
    for cls in sorted(os.listdir(imagenet_tree))[:4]:
        os.makedirs(os.path.join(small, cls))
        for name in sorted(os.listdir(os.path.join(imagenet_tree, cls)))[:10]:
            shutil.copy2(os.path.join(imagenet_tree, cls, name), os.path.join(small, cls, name))
    shutil.copytree(small, os.path.join(src, "imagenet"))
    scan, file = pack_pair(src, root)
    return SimpleNamespace(root=root, src=src, small=small, scan=scan, file=file,
                           st_scan=Store(scan), st_file=Store(file))


def stats(mnt):
    return json.loads(read(os.path.join(mnt, ".fidelity", "stats")))


def check_mode(s, random_reads):
    """The stats `s` show reads of the mode asked for: whole records, or pieces and no record."""
    if random_reads == "records":
        assert s["records_read"] > 0, s
    else:
        assert s["records_read"] == 0 and s["piece_reads"] > 0, s


def test_the_pair_has_the_same_files_and_records_in_two_layouts(pair):
    s, f = pair.st_scan, pair.st_file
    assert (s.layout, s.version, f.layout, f.version) == ("scan", 3, "file", 4)
    s.check_headers()
    f.check_headers()
    kinds = {m["kind"] for m in s.files.values()}
    assert kinds == {"jpeg", "l3", "blob"}, kinds
    assert sum(rel.startswith("imagenet/") for rel in s.files) == 40
    q = ("SELECT id, dir, name, kind, script, record, slot, width, height, source_size, pieces, note FROM files "
         "ORDER BY id")
    assert index_rows(pair.scan, q) == index_rows(pair.file, q)
    for t in ("SELECT * FROM dirs ORDER BY id", "SELECT * FROM skipped ORDER BY 1, 2"):
        assert index_rows(pair.scan, t) == index_rows(pair.file, t)
    layouts = {}
    for rec, (path, layout, size) in f.records.items():
        assert s.records[rec][0] == path and s.records[rec][2] == size, rec  # same bytes, reordered
        layouts[(s.records[rec][1], layout)] = layouts.get((s.records[rec][1], layout), 0) + 1
    # JPEG records: scan (0) in the one, file (2) in the other; whole records (1) in both.
    assert set(layouts) == {(0, 2), (1, 1)}, layouts
    jpeg_records = {m["record"] for m in s.files.values() if m["kind"] == "jpeg"}
    assert any(sum(m["record"] == r for m in s.files.values()) > 1 for r in jpeg_records)
    for rel, m in s.files.items():
        assert f.all_levels(rel) == s.all_levels(rel), rel


def test_inspect_stats_and_log_name_the_layout(pair, tmp_path):
    for store, layout, version in ((pair.scan, "scan", 3), (pair.file, "file", 4)):
        info = json.loads(run("inspect", store, "--json").stdout)
        assert (info["layout"], info["format_version"], info["problems"]) == (layout, version, []), info
        text = run("inspect", store).stdout
        assert any(line.split() == ["layout", layout] for line in text.splitlines()), text
        m = index_meta(store)
        assert (m["layout"], m["format_version"]) == (layout, str(version))
        log = tmp_path / f"{layout}.log"
        cfg = tmp_path / f"{layout}.yaml"
        cfg.write_text(f"log:\n  level: info\n  file: {log}\n")
        with mounted(store, str(tmp_path / f"m-{layout}"), "--config", str(cfg)) as mnt:
            assert stats(mnt)["layout"] == layout
        mounted_lines = [line for line in log.read_text().splitlines() if " mounted " in line]
        assert len(mounted_lines) == 1 and f"{layout} layout" in mounted_lines[0], mounted_lines


def read_tree(mnt, rels):
    """{rel: (bytes, st_size)} of every file under mnt."""
    out = {}
    for rel in rels:
        p = os.path.join(mnt, rel)
        out[rel] = (read(p), os.stat(p).st_size)
    return out


def compare_at_every_level(pair, scan_mnt, file_mnt):
    """Reads every file of both mounts as mounted (full level), then at levels 1..L set on their
    roots: the same bytes from both, sizes that match, and fidstore's bytes of each store (an l3
    file reads as its decoded view: the two mounts must agree)."""
    s, f = pair.st_scan, pair.st_file
    rels = sorted(s.files)
    assert sorted(walk_files(scan_mnt)) == rels and sorted(walk_files(file_mnt)) == rels
    wrong = []
    for level in [None] + list(range(1, s.levels + 1)):
        if level is not None:
            for mnt in (scan_mnt, file_mnt):
                os.setxattr(mnt, XA, str(level).encode())
                assert wait_invalidations(mnt)
        got_s, got_f = read_tree(scan_mnt, rels), read_tree(file_mnt, rels)
        for rel in rels:
            (bs, ss), (bf, sf) = got_s[rel], got_f[rel]
            ok = bs == bf and ss == len(bs) and sf == len(bf)
            if s.files[rel]["kind"] != "l3":
                ok = ok and bs == s.read(rel, level) and bf == f.read(rel, level)
            if not ok:
                wrong.append((level, rel))
    assert wrong == [], wrong[:10]
    for mnt, layout in ((scan_mnt, "scan"), (file_mnt, "file")):
        st = stats(mnt)
        assert st["layout"] == layout and st["eio_errors"] == 0, st


def test_every_file_at_every_level_is_the_same_in_both_layouts(pair, tmp_path):
    with mounted(pair.scan, str(tmp_path / "scan"), "-o", "scan_group=full") as a, \
            mounted(pair.file, str(tmp_path / "file"), "-o", "scan_group=full") as b:
        compare_at_every_level(pair, a, b)


@pytest.mark.parametrize("random_reads", ["pieces", "records"])
def test_levels_through_the_views_and_the_mount_option(pair, tmp_path, random_reads):
    """The /.fidelity/sg/K views of a file store, and a mount at -o scan_group=K, in both random
    read modes: fidstore's bytes of the file store."""
    f = pair.st_file
    jpegs = [r for r in sorted(f.files) if f.files[r]["kind"] == "jpeg"]
    with mounted(pair.file, str(tmp_path / "m"), "-o", f"scan_group=4,random_reads={random_reads}") as mnt:
        assert stats(mnt)["random_reads"]["mode"] == random_reads
        for rel in jpegs:
            assert read(os.path.join(mnt, rel)) == f.read(rel, 4), rel
        # levels from high to low: a record loaded (records mode) for level 10 serves the lower ones
        for level in range(f.levels, 0, -1):
            for rel in jpegs:
                assert read(os.path.join(mnt, ".fidelity", "sg", str(level), rel)) == f.read(rel, level), (level, rel)
        s = stats(mnt)
        assert s["eio_errors"] == 0, s
        check_mode(s, random_reads)


# ---- a damaged piece ----

@pytest.mark.parametrize("random_reads", ["pieces", "records"])
def test_a_damaged_piece_of_a_file_record_fails_only_the_reads_that_need_it(pair, tmp_path, random_reads):
    """A flipped byte inside piece 7 of one JPEG of a file record: that file reads right at levels
    1..6 and is EIO at 7..10; every other file of its record reads right at every level."""
    store = str(tmp_path / "s")
    shutil.copytree(pair.file, store)
    st = Store(store)
    by_record = {}
    for rel, m in st.files.items():
        by_record.setdefault(m["record"], []).append(rel)
    # a JPEG in the middle of a record of several (neighbours on both sides in the file layout)
    victim = next(sorted(rels, key=lambda r: st.files[r]["slot"])[1] for rec, rels in sorted(by_record.items())
                  if st.records[rec][1] == 2 and len(rels) >= 3)
    vrec = st.files[victim]["record"]
    neighbours = sorted(r for r in by_record[vrec] if r != victim)
    off, size, _ = st.files[victim]["pieces"][7]
    assert size > 0
    with open(os.path.join(store, st.records[vrec][0]), "r+b") as fh:
        fh.seek(off + size // 2)
        b = fh.read(1)
        fh.seek(off + size // 2)
        fh.write(bytes([b[0] ^ 0x5A]))
    with pytest.raises(IOError):
        st.read(victim)
    ref = pair.st_file  # the undamaged store: the bytes every good read must give
    eio = 0
    with mounted(store, str(tmp_path / "m"), "-o", f"random_reads={random_reads}") as mnt:
        for level in range(st.levels, 0, -1):  # the damaged levels first: the failure breaks nothing after
            p = os.path.join(mnt, ".fidelity", "sg", str(level), victim)
            if level >= 7:
                with pytest.raises(OSError) as e:
                    read(p)
                assert e.value.errno == errno.EIO, level
                eio += 1
            else:
                assert read(p) == ref.read(victim, level), level
            for rel in neighbours:
                assert read(os.path.join(mnt, ".fidelity", "sg", str(level), rel)) == ref.read(rel, level), (level, rel)
        for level in (6, 7):  # the live tree, its level set on the file
            os.setxattr(os.path.join(mnt, victim), XA, str(level).encode())
            if level == 6:
                assert read(os.path.join(mnt, victim)) == ref.read(victim, 6)
            else:
                with pytest.raises(OSError) as e:
                    read(os.path.join(mnt, victim))
                assert e.value.errno == errno.EIO
                eio += 1
        for rel in sorted(st.files):  # everything else, full level
            if rel != victim and st.files[rel]["kind"] != "l3":
                assert read(os.path.join(mnt, rel)) == ref.read(rel), rel
        s = stats(mnt)
        assert s["eio_errors"] >= eio and s["eio_files"] == 1, s
        check_mode(s, random_reads)


# ---- remote stores ----

@pytest.fixture(scope="module")
def rgw(tmp_path_factory):
    why = remote_servers.missing_s3_server() or (None if shutil.which("aws") else "the aws command is not installed")
    if why:
        pytest.skip(why)
    with remote_servers.s3_server(str(tmp_path_factory.mktemp("rgw") / "s3")) as env, remote_servers.exported(env):
        aws(env, "s3", "mb", f"s3://{BUCKET}")
        yield env


@pytest.fixture(scope="module")
def nginx(pair):
    why = remote_servers.missing_http_server()
    if why:
        pytest.skip(why)
    with remote_servers.http_server(pair.root) as srv:
        yield srv


def test_s3_mounts_of_both_layouts_at_every_level(rgw, pair, tmp_path):
    urls = []
    for store in (pair.scan, pair.file):  # the documented upload: records first, the index last
        url = f"s3://{BUCKET}/up/{os.path.basename(store)}"
        aws(rgw, "s3", "cp", "--recursive", "--only-show-errors", os.path.join(store, "records"), url + "/records")
        aws(rgw, "s3", "cp", "--only-show-errors", os.path.join(store, "index.sqlite"), url + "/index.sqlite")
        urls.append(url)
    with mounted(urls[0], str(tmp_path / "scan"), "-o", "scan_group=full") as a, \
            mounted(urls[1], str(tmp_path / "file"), "-o", "scan_group=full") as b:
        compare_at_every_level(pair, a, b)
        assert stats(b)["store"] == urls[1] and stats(b)["storage_reads"] > 0


def test_http_mounts_of_both_layouts_at_every_level(nginx, pair, tmp_path):
    with mounted(f"{nginx.url}/scan", str(tmp_path / "scan"), "-o", "scan_group=full") as a, \
            mounted(f"{nginx.url}/file", str(tmp_path / "file"), "-o", "scan_group=full,random_reads=pieces") as b:
        compare_at_every_level(pair, a, b)
        assert stats(b)["storage_reads"] > 0


# ---- relayout ----

def same_store(got, want):
    """got has want's records byte for byte, and its index tables; its meta differs only in
    created_unix."""
    names = sorted(os.listdir(os.path.join(want, "records")))
    assert sorted(os.listdir(os.path.join(got, "records"))) == names
    for name in names:
        with open(os.path.join(got, "records", name), "rb") as a, open(os.path.join(want, "records", name), "rb") as b:
            assert a.read() == b.read(), name
    for q in ("SELECT * FROM records ORDER BY id", "SELECT * FROM files ORDER BY id", "SELECT * FROM dirs ORDER BY id",
              "SELECT * FROM skipped ORDER BY 1, 2"):
        assert index_rows(got, q) == index_rows(want, q), q
    a, b = index_meta(got), index_meta(want)
    a.pop("created_unix")
    b.pop("created_unix")
    assert a == b


@pytest.mark.parametrize("to", ["file", "scan"])
def test_relayout_gives_the_other_packs_records(pair, tmp_path, to):
    src, want = (pair.scan, pair.file) if to == "file" else (pair.file, pair.scan)
    out = str(tmp_path / "out")
    p = run("relayout", src, out, "--layout", to, "--progress", "off")
    assert f"({to} layout)" in p.stdout, p.stdout
    same_store(out, want)
    assert os.listdir(tmp_path) == ["out"]  # no temporary folder left beside it
    p = run("verify", out, "--progress", "off")
    assert f"verified {len(pair.st_scan.files)} files, 0 bad" in p.stdout


def test_relayout_from_http_and_to_s3(rgw, nginx, pair, tmp_path):
    # http(s):// source -> folder
    out = str(tmp_path / "from-http")
    run("relayout", f"{nginx.url}/file", out, "--layout", "scan", "--progress", "off")
    same_store(out, pair.scan)
    # folder -> s3://, built in TMPDIR and uploaded, then read back
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    url = f"s3://{BUCKET}/relaid/file"
    run("relayout", pair.scan, url, "--layout", "file", "--progress", "off",
        env={**os.environ, **rgw, "TMPDIR": str(scratch)}, timeout=300)
    assert os.listdir(scratch) == []
    back = str(tmp_path / "back")
    aws(rgw, "s3", "cp", "--recursive", "--only-show-errors", url, back)
    same_store(back, pair.file)
    info = json.loads(run("inspect", url, "--json").stdout)
    assert info["layout"] == "file" and info["problems"] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_relayout_leaves_nothing(nginx, pair, tmp_path, sig):
    """The GET of one record held 2 s at the fault proxy: the relayout is mid-way (its temporary
    folder there) when the signal comes; it exits 1, leaving neither OUT nor its temporary folder."""
    held = pair.st_scan.records[len(pair.st_scan.records) // 2][0]
    work = tmp_path / "w"
    work.mkdir()
    with remote_servers.fault_proxy(nginx.host, nginx.port) as proxy:
        proxy.set("delay", ms=2000, count=1, method="GET", match=held)
        proc = subprocess.Popen([fid_bin(), "relayout", f"{proxy.url}/scan", str(work / "out"), "--layout", "file",
                                 "--progress", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proxy.wait_fault(60), "the relayout never fetched the held record"
            assert os.listdir(work) == [f".out.tmp-{proc.pid}"]
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 1 and "interrupted" in err, (proc.returncode, err)
    assert os.listdir(work) == [], "an interrupted relayout left a store or its temporary folder"


def test_relayout_into_a_non_empty_folder_is_refused(pair, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = run("relayout", pair.scan, str(out), "--layout", "file", "--progress", "off", check=False)
    assert p.returncode in (1, 2) and str(out) in p.stderr, (p.returncode, p.stderr)
    assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["out"]


# ---- bad input ----

def test_an_unknown_layout_is_a_usage_error(pair, tmp_path):
    store = tmp_path / "s"
    p = run("pack", pair.small, store, "--layout", "files", "--progress", "off", check=False)
    assert p.returncode == 2 and "--layout" in p.stderr and "files" in p.stderr, p.stderr
    p = run("relayout", pair.scan, store, "--layout", "files", "--progress", "off", check=False)
    assert p.returncode == 2 and "--layout" in p.stderr and "files" in p.stderr, p.stderr
    p = run("relayout", pair.scan, store, "--progress", "off", check=False)  # --layout is required
    assert p.returncode == 2 and "--layout" in p.stderr, p.stderr
    assert os.listdir(tmp_path) == []


def test_parts_of_different_layouts_do_not_merge(pair, tmp_path):
    root = str(tmp_path)
    common = ("--seed", SEED, "--record-bytes", RECORD_BYTES)
    p0 = pack(pair.small, os.path.join(root, "p0"), "--shard", "0/2", "--layout", "scan", *common)
    p1 = pack(pair.small, os.path.join(root, "p1"), "--shard", "1/2", "--layout", "file", *common)
    target = os.path.join(root, "merged")
    for parts in ((p0, p1), (p1, p0)):
        p = run("merge", *parts, target, check=False)
        assert p.returncode == 1, p.stderr
        assert p0 in p.stderr and p1 in p.stderr, p.stderr
        assert "different layouts" in p.stderr and "relayout" in p.stderr, p.stderr
        assert sorted(os.listdir(root)) == ["p0", "p1"]
    # Two file parts merge into the file pack of the whole source.
    f1 = pack(pair.small, os.path.join(root, "f1"), "--shard", "1/2", "--layout", "file", *common)
    f0 = pack(pair.small, os.path.join(root, "f0"), "--shard", "0/2", "--layout", "file", *common)
    single = pack(pair.small, os.path.join(root, "single"), "--layout", "file", *common)
    run("merge", f0, f1, target)
    q = "SELECT id, dir, name, kind, script, width, height, source_size, pieces, note FROM files ORDER BY id"
    assert index_rows(target, q) == index_rows(single, q)  # records and slots are the parts' (docs/FORMAT.md)
    assert index_meta(target)["layout"] == "file"
    m, ref = Store(target), Store(single)
    for rel in ref.files:
        assert m.all_levels(rel) == ref.all_levels(rel), rel
    assert "0 bad" in run("verify", target, "--progress", "off").stdout
