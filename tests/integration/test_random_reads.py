"""random_reads=auto|records|pieces on real mounts of a local store (docs/MOUNT.md, "Cold reads"):
records mode serves every file byte-identical to fidstore.py (an independent reader of the
format) while loading each record once (a reader whose record is being loaded reads its own pieces
meanwhile: a local disk serves both), and every later read from memory; concurrent readers of one
record cause one load; `auto`
chooses by size, both ways, and again after a level change; a level raised mid-epoch fetches only
the missing tail; the cache budget is never exceeded; bad values exit 2 naming the option.
Remote stores (RGW, nginx, faults, the disk cache): test_remote.py."""
import json
import os
import random
import subprocess
import threading

from conftest import fid_bin
from fidstore import Store
from mountutil import XA, mounted, read_concurrently, walk_files

def stats(mnt):
    with open(os.path.join(mnt, ".fidelity", "stats")) as f:
        return json.load(f)


def read_in_threads(mnt, rels, threads):
    """rel -> bytes; no read may fail."""
    got, eio = read_concurrently(mnt, rels, threads, seconds=300)
    assert eio == []
    return got


def records_of(st, rels):
    return {st.files[r]["record"] for r in rels}


def piece_bytes_bound(st, s, rels, level):
    """The most the reads served from their own pieces (stats' cache_misses: readers of a record
    being loaded) may have fetched: each at most the largest file at `level` (None: full), every
    piece rounded out to 512-byte sectors."""
    most = max(len(st.read(r, level if st.files[r]["kind"] == "jpeg" else None)) for r in rels)
    return s["cache_misses"] * (most + 1024 * (st.levels + 1))


def reread_fetches_nothing(mnt, rels):
    """Reads rels again past the kernel's page cache (dropped for each file first): every read is
    served from the daemon's memory, nothing is fetched from the store."""
    before = stats(mnt)
    for r in rels:
        with open(os.path.join(mnt, r), "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    read_in_threads(mnt, rels, 4)
    after = stats(mnt)
    assert after["reads"] > before["reads"], "the reads reached the daemon"
    for k in ("storage_bytes", "records_read", "piece_reads"):
        assert after[k] == before[k], (k, before[k], after[k])


def prefix_len(st, rec, level):
    """Bytes of record rec's prefix at level (None: whole), from the index (region_ends)."""
    ends = st.db.execute("SELECT region_ends, layout FROM records WHERE id = ?", (rec,)).fetchone()
    import struct
    e = struct.unpack(f"<{len(ends[0]) // 8}Q", ends[0])
    if ends[1] != 0 or level is None:  # whole layout, or the full level
        return e[-1]
    return e[min(level, len(e) - 1)]


def test_records_mode_reads_each_record_once_and_serves_the_right_bytes(imagenet_store, mnt):
    st = Store(imagenet_store)
    rels = sorted(st.files)
    random.Random(3).shuffle(rels)
    with mounted(imagenet_store, mnt, "-o", "random_reads=records,scan_group=5,threads=8"):
        got = read_in_threads(mnt, rels, 8)
        assert [r for r in rels if got[r] != st.read(r, 5 if st.files[r]["kind"] == "jpeg" else None)] == []
        s = stats(mnt)
        reread_fetches_nothing(mnt, rels)
    touched = records_of(st, rels)
    assert s["random_reads"]["mode"] == "records" and s["random_reads"]["setting"] == "records"
    assert s["eio_errors"] == 0
    assert s["records_read"] == len(touched) == s["random_reads"]["loads"]
    want = sum(prefix_len(st, r, 5) for r in touched)
    # each prefix once, rounded up to 4 KiB for O_DIRECT, and the pieces of the files read while
    # their record was loading
    most = want + 4096 * len(touched) + piece_bytes_bound(st, s, rels, 5)
    assert want <= s["storage_bytes"] <= most, (s["storage_bytes"], want, s["cache_misses"])


def test_concurrent_readers_of_one_record_cause_one_load(imagenet_store, mnt):
    st = Store(imagenet_store)
    by_record = {}
    for rel, f in st.files.items():
        by_record.setdefault(f["record"], []).append(rel)
    rec, members = max(by_record.items(), key=lambda kv: len(kv[1]))
    assert len(members) >= 8
    with mounted(imagenet_store, mnt, "-o", "random_reads=records,threads=16"):
        barrier = threading.Barrier(len(members))
        got, errors = {}, []

        def one(rel):
            barrier.wait(timeout=60)
            try:
                with open(os.path.join(mnt, rel), "rb") as f:
                    got[rel] = f.read()
            except OSError as e:
                errors.append(e)

        ts = [threading.Thread(target=one, args=(rel,)) for rel in members]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in ts) and errors == []
        assert all(got[r] == st.read(r) for r in members)
        s = stats(mnt)
        reread_fetches_nothing(mnt, members)
    # one load; the readers that found it in flight read their own pieces meanwhile
    want = prefix_len(st, rec, None)
    assert s["records_read"] == 1, s
    assert want <= s["storage_bytes"] <= want + 4096 + piece_bytes_bound(st, s, members, None), s


def test_auto_chooses_by_size_both_ways_and_after_a_level_change(imagenet_store, tmp_path):
    st = Store(imagenet_store)
    rels = sorted(st.files)
    with mounted(imagenet_store, str(tmp_path / "probe"), "-o", "scan_group=2") as mnt:
        low = stats(mnt)["random_reads"]["needed"]
        os.setxattr(mnt, XA, b"full")
        full = stats(mnt)["random_reads"]["needed"]
    assert 0 < low < full
    # cache = exactly what level 2 needs: records; one byte less: pieces
    for cache, mode in ((low, "records"), (low - 1, "pieces")):
        with mounted(imagenet_store, str(tmp_path / f"c{cache}"), "-o", f"scan_group=2,cache={cache}") as mnt:
            rr = stats(mnt)["random_reads"]
            assert (rr["mode"], rr["setting"], rr["budget"], rr["budget_of"]) == (mode, "auto", cache, "cache"), rr
            assert rr["share"] == "every record"
            sample = rels[::7]
            got = read_in_threads(mnt, sample, 4)
            assert [r for r in sample if got[r] != st.read(r, 2 if st.files[r]["kind"] == "jpeg" else None)] == []
            s = stats(mnt)
            if mode == "records":
                assert s["records_read"] == len(records_of(st, sample)) == s["random_reads"]["loads"]
            else:
                assert s["records_read"] == 0 and s["piece_reads"] > 0
    # a level change decides again: level 2 fits, full does not, back to 2 fits; the log says so
    log = tmp_path / "mount.log"
    cfg = tmp_path / "log.yaml"
    cfg.write_text(f"log:\n  file: {log}\n")
    with mounted(imagenet_store, str(tmp_path / "flip"), "--config", str(cfg), "-o", f"scan_group=2,cache={low}") as mnt:
        assert stats(mnt)["random_reads"]["mode"] == "records"
        os.setxattr(mnt, XA, b"full")
        rr = stats(mnt)["random_reads"]
        assert rr["mode"] == "pieces" and rr["needed"] == full, rr
        os.removexattr(mnt, XA)
        assert stats(mnt)["random_reads"]["mode"] == "records"
    text = log.read_text()
    assert f"random reads: records (auto: the prefixes of every record need {low} B, cache holds {low} B)" in text
    assert f"random reads: pieces (auto: the prefixes of every record need {full} B, cache holds only {low} B)" in text


def test_a_level_raised_mid_epoch_fetches_only_the_missing_tail(imagenet_store, mnt):
    st = Store(imagenet_store)
    rels = sorted(st.files)
    random.Random(4).shuffle(rels)
    half = rels[: len(rels) // 2]
    with mounted(imagenet_store, mnt, "-o", "random_reads=records,scan_group=3"):
        got = read_in_threads(mnt, half, 4)
        assert all(got[r] == st.read(r, 3 if st.files[r]["kind"] == "jpeg" else None) for r in half)
        os.setxattr(mnt, XA, b"full")
        got = read_in_threads(mnt, rels, 4)
        assert [r for r in rels if got[r] != st.read(r)] == []
        s = stats(mnt)
    touched = records_of(st, rels)
    whole = sum(prefix_len(st, r, None) for r in touched)
    # level-3 prefixes of the first half's records, then only their tails: the store's bytes
    # once (plus O_DIRECT alignment: 4 KiB a prefix, 2 x 512 B a tail), and the pieces of the
    # files read while their record was loading
    assert s["prefix_extensions"] > 0
    most = whole + 5120 * 2 * len(touched) + piece_bytes_bound(st, s, rels, None)
    assert whole <= s["storage_bytes"] <= most, (s["storage_bytes"], whole, s["cache_misses"])


def test_the_cache_budget_is_never_exceeded(imagenet_store, mnt):
    st = Store(imagenet_store)
    rels = sorted(st.files)
    random.Random(5).shuffle(rels)
    budget = 3 << 20  # three of the store's 1 MiB records
    with mounted(imagenet_store, mnt, "-o", f"random_reads=records,cache={budget},threads=8"):
        got = read_in_threads(mnt, rels, 8)
        assert [r for r in rels if got[r] != st.read(r)] == []
        s = stats(mnt)
    assert s["cache"]["peak"] <= budget and s["cache"]["budget"] == budget
    assert s["cache"]["evictions"] > 0 and s["eio_errors"] == 0


def test_bad_values_exit_2_naming_the_option(imagenet_store, mnt, tmp_path):
    def mount(*args):
        return subprocess.run([fid_bin(), "mount", imagenet_store, mnt, *args], capture_output=True, text=True)

    for opt in ("random_reads=sometimes", "order_ranks=fixed", "random_reads="):
        p = mount("-o", opt)
        assert p.returncode == 2 and opt.split("=")[0] in p.stderr, (opt, p.stderr)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("order_ranks: per_epoch\n")
    p = mount("--config", str(cfg))
    assert p.returncode == 2 and f"{cfg}:1" in p.stderr and "order_ranks" in p.stderr
    assert walk_files(mnt) == []  # nothing was mounted
