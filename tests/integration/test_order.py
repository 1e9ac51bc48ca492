"""Published read orders (/.fidelity/order/epoch-N[.rank-R-of-W]): permutations of the tree,
deterministic, rank splits of whole records (disjoint, complete, padded to equal lengths with a
rank's own files), the quasi-random window, the order seed (config and root xattr), the layout
xattrs, and the torch sampler that follows them."""
import errno
import os
import shutil

import pytest

from conftest import pack
from mountutil import mounted, walk_files

ORDER = os.path.join(".fidelity", "order")




def lines(mnt, name):
    with open(os.path.join(mnt, ORDER, name), "rb") as f:
        data = f.read()
    assert os.stat(os.path.join(mnt, ORDER, name)).st_size == len(data)
    assert data.endswith(b"\n")
    return data.decode().split("\n")[:-1]


def check_rank_split(parts, files, record_of):
    """The rank orders of one epoch and world (docs/FORMAT.md): each rank's own files (the order
    up to its first repeat) are whole records no other rank has, together every file once; all
    ranks have the same length; the padding is the rank's own order's tail repeated end to end
    and shorter than a record."""
    length = len(parts[0])
    per_record = {}
    for f in files:
        per_record[record_of[f]] = per_record.get(record_of[f], 0) + 1
    owner = {}
    own_all = []
    for r, p in enumerate(parts):
        assert len(p) == length, f"rank {r}: {len(p)} lines, rank 0 has {length}"
        n = len(set(p))
        own = p[:n]
        assert len(set(own)) == n, f"rank {r}: a repeat before its own files end"
        assert all(p[j] == own[(j - length) % n] for j in range(n, length)), f"rank {r}: padding"
        assert length - n < max(per_record.values())
        if own in (q[:len(set(q))] for q in parts[:r]):
            continue  # a rank without records of its own repeats another's (more ranks than records)
        for f in own:
            assert owner.setdefault(record_of[f], r) == r, f"record {record_of[f]} in ranks {owner[record_of[f]]} and {r}"
        own_all += own
    assert sorted(own_all) == files  # disjoint and complete
    assert len(owner) == len(per_record)


def test_orders_are_deterministic_permutations(imagenet_store, mnt):
    with mounted(imagenet_store, mnt):
        files = sorted(walk_files(mnt))
        e0, e1 = lines(mnt, "epoch-0"), lines(mnt, "epoch-1")
        assert sorted(e0) == files and sorted(e1) == files
        assert e0 != e1 and e0 != files  # shuffled, and differently per epoch
        assert lines(mnt, "epoch-0") == e0
        big = lines(mnt, "epoch-18446744073709551615")
        assert sorted(big) == files
        assert lines(mnt, "epoch-1.rank-0-of-1") == e1
        record_of = {f: int(os.getxattr(os.path.join(mnt, f), "user.fidelity.record")) for f in files}
        for w in (2, 3, 7):
            parts = [lines(mnt, f"epoch-1.rank-{r}-of-{w}") for r in range(w)]
            check_rank_split(parts, files, record_of)
            assert parts == [lines(mnt, f"epoch-1.rank-{r}-of-{w}") for r in range(w)]  # deterministic
            # a rank reads its records nearly in sequence, not every record of the store
            assert len({record_of[f] for f in parts[0]}) < len(set(record_of.values()))
        # more ranks than records: every rank still gets an order of the common length
        nrec = len(set(record_of.values()))
        w = nrec + 2
        parts = [lines(mnt, f"epoch-1.rank-{r}-of-{w}") for r in (0, nrec - 1, nrec, nrec + 1)]
        assert len({len(p) for p in parts}) == 1
        assert parts[2] == parts[0] and parts[3] == lines(mnt, f"epoch-1.rank-1-of-{w}")
        # not listed, bad names are ENOENT
        assert os.listdir(os.path.join(mnt, ORDER)) == []
        assert ".fidelity" not in os.listdir(mnt)
        for bad in ("epoch-", "epoch-01", "epoch--1", "epoch-x", "epoch-1.rank-3-of-3", "epoch-1.rank-0-of-0",
                    "epoch-1.rank-1-of-02", "epoch-1.rank-1", "epoch-18446744073709551616", "Epoch-1", "epoch-1.x"):
            with pytest.raises(FileNotFoundError):
                os.stat(os.path.join(mnt, ORDER, bad))
        with pytest.raises(OSError) as e:
            open(os.path.join(mnt, ORDER, "epoch-0"), "w")
        assert e.value.errno == errno.EROFS
    with mounted(imagenet_store, mnt):  # same store, same seed: same orders after a remount
        assert lines(mnt, "epoch-0") == e0


def test_many_order_names_reuse_slots(imagenet_store, mnt):
    with mounted(imagenet_store, mnt):
        first = lines(mnt, "epoch-0")
        for e in range(300):  # more names than inode slots
            assert os.stat(os.path.join(mnt, ORDER, f"epoch-{e}.rank-0-of-2")).st_size > 0
        assert lines(mnt, "epoch-0") == first
        halves = [lines(mnt, f"epoch-299.rank-{r}-of-2") for r in range(2)]
        assert sorted(set(halves[0]) | set(halves[1])) == sorted(lines(mnt, "epoch-299"))
        assert not set(halves[0]) & set(halves[1]) and len(halves[0]) == len(halves[1])


def test_window_and_layout_xattrs(imagenet_store, mnt, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("order_window: 2\norder_seed: 7\n")
    with mounted(imagenet_store, mnt, "--config", str(cfg)):
        assert os.getxattr(mnt, "user.fidelity.order_seed") == b"7"
        order = lines(mnt, "epoch-3")
        rec = {p: int(os.getxattr(os.path.join(mnt, p), "user.fidelity.record")) for p in order}
        pos = {p: int(os.getxattr(os.path.join(mnt, p), "user.fidelity.position")) for p in order}
        assert sorted(pos.values()) == list(range(len(order)))
        # storage order: positions are grouped by record
        by_pos = sorted(order, key=pos.get)
        assert [rec[p] for p in by_pos] == sorted(rec[p] for p in by_pos)
        # at most `order_window` records are being drawn from at any point of the order
        left = {}
        for p in order:
            left[rec[p]] = left.get(rec[p], 0) + 1
        started, active, peak = set(), 0, 0
        for p in order:
            r = rec[p]
            if r not in started:
                started.add(r)
                active += 1
            peak = max(peak, active)
            left[r] -= 1
            if left[r] == 0:
                active -= 1
        assert peak <= 2 and len(set(rec.values())) > 2
        # the root xattr changes the seed (and the orders) at once; removing it restores the config's
        os.setxattr(mnt, "user.fidelity.order_seed", b"12345")
        assert os.getxattr(mnt, "user.fidelity.order_seed") == b"12345"
        other = lines(mnt, "epoch-3")
        assert other != order and sorted(other) == sorted(order)
        for bad in (b"", b"-1", b"x", b"18446744073709551616", b"1 2"):
            with pytest.raises(OSError) as e:
                os.setxattr(mnt, "user.fidelity.order_seed", bad)
            assert e.value.errno == errno.EINVAL
        assert os.getxattr(mnt, "user.fidelity.order_seed") == b"12345"
        os.removexattr(mnt, "user.fidelity.order_seed")
        assert os.getxattr(mnt, "user.fidelity.order_seed") == b"7"
        assert lines(mnt, "epoch-3") == order
        with pytest.raises(OSError) as e:  # only the root has a seed
            os.setxattr(os.path.join(mnt, order[0]), "user.fidelity.order_seed", b"1")
        assert e.value.errno == errno.EINVAL


@pytest.mark.parametrize("deal", ["stable", "per-epoch"])
def test_orders_match_the_format_written_independently(imagenet_store, mnt, deal):
    """The order files against fidstore.py's implementation of docs/FORMAT.md "Published read
    orders" (world 1 and rank orders, both deals); with the stable deal a rank keeps its records
    in every epoch, with per-epoch it does not."""
    import fidstore
    st = fidstore.Store(imagenet_store)
    seed = int(st.meta["seed"])
    with mounted(imagenet_store, mnt, "-o", f"order_ranks={deal}"):
        for epoch in (0, 3):
            assert lines(mnt, f"epoch-{epoch}") == fidstore.epoch_order(st, seed, epoch)
            for w in (2, 3):
                for r in range(w):
                    assert lines(mnt, f"epoch-{epoch}.rank-{r}-of-{w}") == \
                        fidstore.epoch_order(st, seed, epoch, r, w, deal=deal), (epoch, r, w)
        rec = {rel: f["record"] for rel, f in st.files.items()}
        shares = [{rec[p] for p in lines(mnt, f"epoch-{e}.rank-1-of-3")} for e in (0, 1, 2)]
        if deal == "stable":
            assert shares[0] == shares[1] == shares[2]
            assert lines(mnt, "epoch-0.rank-1-of-3") != lines(mnt, "epoch-1.rank-1-of-3")  # reshuffled
        else:
            assert shares[0] != shares[1] or shares[1] != shares[2]


def test_sampler_resumes_mid_epoch(imagenet_store, mnt):
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("torchvision.datasets")
    from fidelityfs.sampler import FidelityOrderSampler
    with mounted(imagenet_store, mnt):
        ds = datasets.ImageFolder(mnt)
        for rank, world in ((0, 1), (1, 3)):
            full = FidelityOrderSampler(ds, rank=rank, world_size=world)
            full.set_epoch(2)
            order = list(full)
            s = FidelityOrderSampler(ds, rank=rank, world_size=world)
            s.set_epoch(2)
            it = iter(s)
            taken = [next(it) for _ in range(37)]
            state = s.state_dict()
            assert state["epoch"] == 2 and state["position"] == 37
            assert state["rank"] == rank and state["world_size"] == world
            assert state["seed"] == int(os.getxattr(mnt, "user.fidelity.order_seed"))
            # a fresh sampler (a restarted job) resumes with the same remaining samples
            again = FidelityOrderSampler(ds, rank=rank, world_size=world)
            again.load_state_dict(state)
            again.set_epoch(2)  # the training loop's usual call keeps the resumed position
            assert taken + list(again) == order
            again.set_epoch(3)  # the next epoch is whole
            nxt = FidelityOrderSampler(ds, rank=rank, world_size=world)
            nxt.set_epoch(3)
            assert list(again) == list(nxt)
            # with a DataLoader (workers take indices ahead): the loop's own count
            loader = torch.utils.data.DataLoader(list(range(len(ds))), batch_size=10, sampler=s)
            s.set_epoch(2)
            batches = iter(loader)
            seen = [int(i) for _ in range(3) for i in next(batches)]
            state = s.state_dict(samples_seen=30)
            resumed = FidelityOrderSampler(ds, rank=rank, world_size=world)
            resumed.load_state_dict(state)
            assert seen + list(resumed) == order
        s = FidelityOrderSampler(ds, rank=1, world_size=3)
        state = s.state_dict()
        for key, value in (("world_size", 4), ("rank", 2), ("seed", state["seed"] + 1)):
            with pytest.raises(ValueError, match=key):
                FidelityOrderSampler(ds, rank=1, world_size=3).load_state_dict({**state, key: value})
        with pytest.raises(ValueError):
            FidelityOrderSampler(ds, rank=1, world_size=3).load_state_dict({"epoch": 1})
        with pytest.raises(ValueError):
            s.state_dict(samples_seen=len(s) + 1)


def test_sampler_follows_the_order(imagenet_store, mnt):
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("torchvision.datasets")
    from fidelityfs.sampler import FidelityOrderSampler  # python/ (conftest puts it on sys.path)
    with mounted(imagenet_store, mnt):
        ds = datasets.ImageFolder(mnt)
        sampler = FidelityOrderSampler(ds)
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            got = [os.path.relpath(ds.samples[i][0], mnt) for i in sampler]
            assert got == lines(mnt, f"epoch-{epoch}")
            assert len(sampler) == len(ds)
        sub = ds
        parts = []
        for r in range(3):
            s = FidelityOrderSampler(sub, rank=r, world_size=3)
            s.set_epoch(5)
            parts.append([os.path.relpath(sub.samples[i][0], mnt) for i in s])
            assert parts[-1] == lines(mnt, f"epoch-5.rank-{r}-of-3")
            assert len(s) == len(parts[-1])
        # equal lengths (DistributedSampler's contract); the padding repeats a rank's own samples
        assert len({len(p) for p in parts}) == 1
        own = [set(p) for p in parts]
        assert not (own[0] & own[1]) and not (own[0] & own[2]) and not (own[1] & own[2])
        assert sorted(set().union(*own)) == sorted(os.path.relpath(p, mnt) for p, _ in sub.samples)
        loader = torch.utils.data.DataLoader(list(range(len(ds))), batch_size=50, sampler=sampler)
        assert sum(len(b) for b in loader) == len(ds)
        with pytest.raises(ValueError):
            FidelityOrderSampler(ds, rank=3, world_size=3)


def stats(mnt):
    import json
    with open(os.path.join(mnt, ".fidelity", "stats")) as f:
        return json.load(f)


def read_all(paths, threads):
    """Reads every path fully with `threads` threads taking the next one in list order."""
    import threading
    it = iter(list(enumerate(paths)))
    lock = threading.Lock()
    sizes = {}

    def work():
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            with open(nxt[1], "rb") as f:
                sizes[nxt[1]] = len(f.read())

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sizes


def vm_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def test_published_order_reads_whole_records_within_budget(imagenet_store, mnt, tmp_path):
    from fidstore import Store
    from mountutil import daemon_pid
    st = Store(imagenet_store)
    budget = 4 << 20  # the store's 1 MiB records do not all fit; 2 active + the next one do
    cfg = tmp_path / "c.yaml"
    cfg.write_text("order_window: 2\n")
    with mounted(imagenet_store, mnt, "--config", str(cfg), "-o", f"cache={budget},threads=4"):
        pid = daemon_pid(mnt)
        rss0 = vm_kb(pid, "VmRSS")
        order = [os.path.join(mnt, p) for p in lines(mnt, "epoch-2")]
        sizes = read_all(order, 4)
        s = stats(mnt)
        assert all(sizes[p] == os.stat(p).st_size for p in order)
        # whole records, each read once and reused for its files
        assert s["records_read"] > 0 and s["prefetch_hits"] > len(order) // 2
        assert s["records_read"] <= 2 * len(set(st.files[os.path.relpath(p, mnt)]["record"] for p in order))
        assert s["storage_bytes"] <= 1.5 * s["bytes_served"]
        assert s["cache"]["peak"] <= budget and s["cache"]["used"] <= budget and s["cache"]["evictions"] > 0
        assert vm_kb(pid, "VmHWM") <= rss0 + (budget >> 10) + 16 * 1024  # + FUSE thread buffers
        # the same files through the order again: still exact bytes (cache hits or fresh reads)
        again = read_all(order[:50], 2)
        assert all(again[p] == sizes[p] for p in order[:50])


def test_random_access_reads_only_own_pieces(imagenet_store, mnt):
    """random_reads=pieces: reads that do not follow an order fetch their own pieces only (records
    mode, the default when the cache holds the store: test_random_reads.py)."""
    import random
    with mounted(imagenet_store, mnt, "-o", "cache=64MiB,random_reads=pieces"):
        lines(mnt, "epoch-0")  # an order is published, but the reads do not follow it
        files = [os.path.join(mnt, p) for p in walk_files(mnt)]
        random.Random(5).shuffle(files)
        read_all(files, 4)
        s = stats(mnt)
        assert s["records_read"] == 0 and s["cache_hits"] == 0 and s["prefetch_issued"] == 0
        # each piece costs its own bytes rounded out to 512-byte sectors at most
        assert s["storage_bytes"] <= s["bytes_served"] + s["piece_reads"] * 1024
        assert s["piece_reads"] > 0


def test_rank_order_prefetches_only_its_own_records(imagenet_store, mnt, tmp_path):
    """The prefetcher alone (random_reads=pieces: reads before it follows load no records)."""
    from fidstore import Store
    st = Store(imagenet_store)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("order_window: 2\n")
    with mounted(imagenet_store, mnt, "--config", str(cfg), "-o", "cache=64MiB,threads=4,random_reads=pieces"):
        rank = lines(mnt, "epoch-4.rank-1-of-3")
        own = {st.files[p]["record"] for p in rank}
        assert len(own) < len(st.records)
        sizes = read_all([os.path.join(mnt, p) for p in rank], 4)
        assert all(sizes[os.path.join(mnt, p)] == os.stat(os.path.join(mnt, p)).st_size for p in rank)
        s = stats(mnt)
        assert s["prefetch_following"] and s["prefetch_hits"] > len(rank) // 2
        # whole records, each once, and none of the other ranks' records
        assert 0 < s["records_read"] <= len(own)
        assert s["storage_bytes"] <= 1.5 * sum(st.records[r][2] for r in own)


def test_names_with_newlines_are_one_line_each(imagenet_tree, tmp_path, mnt):
    """A newline, carriage return or backslash in a file or folder name is escaped in the order
    files (docs/FORMAT.md), so every file is one line, and the sampler yields every sample."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("torchvision.datasets")
    from fidelityfs.sampler import FidelityOrderSampler, order_line_path
    src = tmp_path / "odd"
    jpegs = [os.path.join(d, f) for d, _, fs in os.walk(imagenet_tree) for f in sorted(fs) if f.lower().endswith(".jpeg")]
    names = {"plain/a.jpg", "plain/new\nline.jpg", "plain/back\\slash.jpg", "plain/cr\r.jpg",
             "two\nlines/b.jpg", "two\nlines/\\n.jpg"}
    for rel, jpeg in zip(sorted(names), jpegs):
        os.makedirs(src / os.path.dirname(rel), exist_ok=True)
        shutil.copyfile(jpeg, src / rel)
    store = pack(str(src), str(tmp_path / "store"))
    with mounted(store, mnt):
        got = lines(mnt, "epoch-0")
        assert len(got) == len(names)
        assert sorted(order_line_path(l) for l in got) == sorted(names)
        assert "plain/new\\nline.jpg" in got and "plain/back\\\\slash.jpg" in got
        ds = datasets.ImageFolder(mnt)
        assert len(ds) == len(names)
        sampler = FidelityOrderSampler(ds)
        assert sorted(sampler) == list(range(len(names)))
        assert [os.path.relpath(ds.samples[i][0], mnt) for i in sampler] == [order_line_path(l) for l in got]
