"""A second, independent reader of the store format (docs/FORMAT.md), used by the tests to
check the packer without going through the C++ loader or the mount."""
import os
import sqlite3
import struct

import xxhash

EOI = b"\xff\xd9"


class Store:
    def __init__(self, path):
        self.path = path
        self.db = sqlite3.connect(f"file:{os.path.join(path, 'index.sqlite')}?mode=ro", uri=True)
        self.meta = dict(self.db.execute("SELECT key, value FROM meta"))
        self.levels = int(self.meta["levels"])
        self.version = int(self.meta["format_version"])
        # Format 4 may have file records (layout 2); older stores have scan records only.
        self.layout = self.meta.get("layout", "scan")
        assert self.layout in ("scan", "file") and (self.layout == "scan" or self.version >= 4), self.meta
        self.dirs = {i: (parent, bytes(name)) for i, parent, name in self.db.execute("SELECT id, parent, name FROM dirs")}
        self.records = {i: (p, layout, size) for i, p, layout, size in
                        self.db.execute("SELECT id, path, layout, size FROM records")}
        # Format 3 records the id in each record file's header (a merge keeps it); before, it was the id.
        self.header_ids = dict(self.db.execute(
            "SELECT id, header_id FROM records" if self.version >= 3 else "SELECT id, id FROM records"))
        region_ends = {i: struct.unpack(f"<{len(b) // 8}Q", b) for i, b in
                       self.db.execute("SELECT id, region_ends FROM records")}
        self.files = {}
        for row in self.db.execute("SELECT id, dir, name, kind, record, slot, source_size, pieces, script FROM files"):
            fid, d, name, kind, rec, slot, source_size, blob, script = row
            if self.version == 1:
                pieces = [struct.unpack_from("<QII", blob, i) for i in range(0, len(blob), 16)]
            else:
                pieces = self.sizes_and_checksums(blob)
            rel = self.dir_path(d)
            rel = (rel + "/" if rel else "") + bytes(name).decode("utf-8", "surrogateescape")
            # Format 7: a frame of a video kept as its stream; `script` is its place in its GOP.
            self.files[rel] = dict(id=fid, kind=("jpeg", "l3", "blob", "frame")[kind], record=rec, slot=slot,
                                   source_size=source_size, pieces=pieces, script=script)
        # Format 5 may have clips: a row a run of one clip's frames in one record (their slots).
        self.clips = [dict(id=i, dir=d, record=r, first_slot=first, frames=n) for i, d, r, first, n in
                      self.db.execute("SELECT id, dir, record, first_slot, frames FROM clips ORDER BY id")] \
            if self.version >= 5 else []
        # Format 6 may have unreferenced rows: the pieces of files an append replaced, in their slots.
        self.unreferenced = [dict(record=r, slot=slot, pieces=self.sizes_and_checksums(blob)) for r, slot, blob in
                             self.db.execute("SELECT record, slot, pieces FROM unreferenced")] \
            if self.version >= 6 else []
        if self.version >= 2:
            self.derive_offsets(region_ends)
        self.skipped = [(bytes(p).decode("utf-8", "surrogateescape"), r)
                        for p, r in self.db.execute("SELECT path, reason FROM skipped")]
        # Any version may have a videos table: a row a clip folder made from a video, by its path.
        has_videos = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'videos'").fetchone()
        self.videos = {self.dir_path(d): dict(name=bytes(n).decode("utf-8", "surrogateescape"), source_size=size,
                                              codec=codec, frame_rate=(num, den), width=w, height=h, frames=frames)
                       for d, n, size, codec, num, den, w, h, frames in self.db.execute(
                           "SELECT dir, name, source_size, codec, fps_num, fps_den, width, height, frames FROM videos")
                       } if has_videos else {}
        # Format 7: the video_streams rows, joined to their folders' videos rows.
        if self.version >= 7:
            for d, codec, extradata, w, h, gop, stored in self.db.execute(
                    "SELECT dir, codec, extradata, width, height, gop, stored_bytes FROM video_streams"):
                self.videos[self.dir_path(d)]["stream"] = dict(codec=codec, extradata=bytes(extradata), width=w,
                                                               height=h, gop=gop, stored_bytes=stored)

    @staticmethod
    def sizes_and_checksums(blob):
        """Format 2 pieces: a LEB128 size, then a u32 checksum; offsets come later (None)."""
        pieces, i = [], 0
        while i < len(blob):
            size, shift = 0, 0
            while True:
                b = blob[i]
                i += 1
                size |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            pieces.append([None, size, struct.unpack_from("<I", blob, i)[0]])
            i += 4
        return pieces

    def derive_offsets(self, region_ends):
        """Format 2: within region k of a record, the pieces that lie there (piece k of each file
        of a scan record, the one piece of each file of a whole record) follow each other in slot
        order from the region's start (the header's end, or region k-1's end). In a file record a
        clip run's frames lie by level: every frame's piece 0 in slot order, then every piece 1, ...
        An unreferenced row (format 6) takes its slot as a file does; afterwards each record's files
        are numbered 0..n-1 without those (as orders count them), clip runs' first slots with them."""
        by_record = {}
        for f in list(self.files.values()) + self.unreferenced:
            by_record.setdefault(f["record"], []).append(f)
        runs = {(c["record"], c["first_slot"]): c["frames"] for c in self.clips}
        for rec, members in by_record.items():
            ends = region_ends[rec]
            pos = [16] + list(ends[:-1])
            members = sorted(members, key=lambda f: f["slot"])
            assert [m["slot"] for m in members] == list(range(len(members))), f"record {rec}: slots"
            i = 0
            while i < len(members):
                frames = runs.get((rec, i), 0) if self.records[rec][1] == 2 else 0
                if frames:
                    for k in range(self.levels + 1):
                        for f in members[i:i + frames]:
                            f["pieces"][k][0] = pos[0]
                            pos[0] += f["pieces"][k][1]
                    i += frames
                    continue
                for k, piece in enumerate(members[i]["pieces"]):
                    # scan records: piece k in region k; whole and file records: every piece in
                    # region 0, a file's pieces back to back
                    region = k if self.records[rec][1] == 0 else 0
                    piece[0] = pos[region]
                    pos[region] += piece[1]
                i += 1
            assert pos == list(ends), f"record {rec}: pieces end at {pos}, regions at {ends}"
            if self.unreferenced:
                files = [m for m in members if "id" in m]  # not the unreferenced rows
                place = {m["slot"]: k for k, m in enumerate(files)}
                for c in self.clips:
                    if c["record"] == rec:
                        c["first_slot"] = place[c["first_slot"]]
                for k, m in enumerate(files):
                    m["slot"] = k
        for f in self.files.values():
            f["pieces"] = [tuple(p) for p in f["pieces"]]

    def unreferenced_bytes(self):
        return sum(size for u in self.unreferenced for _, size, _ in u["pieces"])

    def clip_ranges(self, level):
        """Each clip run's frames up to `level` in a file record: (record, first byte, bytes)."""
        out = []
        by_slot = {(f["record"], f["slot"]): f for f in self.files.values()}
        for c in self.clips:
            if self.records[c["record"]][1] != 2:
                continue
            frames = [by_slot[(c["record"], c["first_slot"] + j)] for j in range(c["frames"])]
            start = frames[0]["pieces"][0][0]
            end = max(f["pieces"][level][0] + f["pieces"][level][1] for f in frames)
            out.append((c["record"], start, end - start))
        return out

    def check_headers(self):
        """Every record file starts with the magic, its header id and its layout."""
        for rec, (path, layout, size) in self.records.items():
            with open(os.path.join(self.path, path), "rb") as fh:
                head = fh.read(16)
            assert os.path.getsize(os.path.join(self.path, path)) == size, path
            assert head[:8] == b"FIDREC01", path
            assert struct.unpack_from("<IB", head, 8) == (self.header_ids[rec], layout), path

    def dir_path(self, d):
        parts = []
        while d != 0:
            parent, name = self.dirs[d]
            parts.append(name.decode("utf-8", "surrogateescape"))
            d = parent
        return "/".join(reversed(parts))

    def all_dirs(self):
        return sorted(self.dir_path(d) for d in self.dirs if d != 0)

    def piece_range(self, f, i):
        """(offset, size) of piece i of file row f in its record file."""
        offset, size, _ = f["pieces"][i]
        return offset, size

    def piece(self, rel, i, check=True):
        f = self.files[rel]
        offset, size, checksum = f["pieces"][i]
        with open(os.path.join(self.path, self.records[f["record"]][0]), "rb") as fh:
            fh.seek(offset)
            data = fh.read(size)
        if check and (xxhash.xxh3_64_intdigest(data) & 0xFFFFFFFF) != checksum:
            raise IOError(f"checksum mismatch in {rel} piece {i}")
        return data

    def read(self, rel, level=None):
        """The bytes a reader gets for `rel` at `level` (None = full)."""
        f = self.files[rel]
        if f["kind"] != "jpeg":
            return self.piece(rel, 0)
        k = self.levels if level is None else level
        return b"".join(self.piece(rel, i) for i in range(k + 1)) + EOI

    def all_levels(self, rel):
        """The bytes a reader gets for `rel` at each level 1..L (one entry for non-JPEGs)."""
        f = self.files[rel]
        if f["kind"] != "jpeg":
            return [self.piece(rel, 0)]
        pieces = [self.piece(rel, i) for i in range(self.levels + 1)]
        return [b"".join(pieces[:k + 1]) + EOI for k in range(1, self.levels + 1)]


# ---- published read orders (docs/FORMAT.md "Published read orders"), written from the text ----

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, state):
        self.state = state & M64

    def next(self):
        self.state = (self.state + GAMMA) & M64
        return mix(self.state)

    def below(self, n):
        return (self.next() * n) >> 64


def shuffle(v, g):
    for i in range(len(v), 1, -1):
        j = g.below(i)
        v[i - 1], v[j] = v[j], v[i - 1]


def rank_orders(store, seed, epoch, world=1, window=4, deal="stable"):
    """Every rank's own order (file paths, no padding) and the padded length L."""
    members = {r: [] for r in store.records}
    for rel, f in store.files.items():
        members[f["record"]].append((f["slot"], rel))
    members = {r: [rel for _, rel in sorted(m)] for r, m in members.items()}
    nrec = len(store.records)
    # A record's units in slot order: a clip run (its frames drawn together, in slot order) or a file.
    runs = {(c["record"], c["first_slot"]): c["frames"] for c in store.clips}
    units = {}
    for r, m in members.items():
        units[r], k = [], 0
        while k < len(m):
            n = runs.get((r, k), 1)
            units[r].append(m[k:k + n])
            k += n

    def draw(records, g):
        pool, out, nxt, active, left = [], [], 0, 0, {}

        def admit():
            nonlocal nxt, active
            while active < window and nxt < len(records):
                r = records[nxt]
                nxt += 1
                if members[r]:
                    pool.extend(units[r])
                    left[r] = len(units[r])
                    active += 1
        admit()
        while pool:
            i = g.below(len(pool))
            unit = pool[i]
            pool[i] = pool[-1]
            pool.pop()
            out.extend(unit)
            rec = store.files[unit[0]]["record"]
            left[rec] -= 1
            if left[rec] == 0:
                active -= 1
                admit()
        return out

    def deal_to_ranks(shuffled):
        ranks, load = [], []
        for r in shuffled:
            if not members[r]:
                continue
            if len(ranks) < world:
                ranks.append([r])
                load.append(len(members[r]))
                continue
            best = min(range(world), key=lambda k: (load[k], k))
            ranks[best].append(r)
            load[best] += len(members[r])
        return ranks, max(load, default=0)

    s0 = (seed ^ (0xD1B54A32D192ED03 * (epoch + 1))) & M64
    e = SplitMix64(s0)
    if world == 1:
        records = list(range(nrec))
        shuffle(records, e)
        order = draw(records, e)
        return [order], len(order)
    if deal == "stable":
        d = SplitMix64(seed ^ 0x9FB21C651E98DF25)
        records = list(range(nrec))
        shuffle(records, d)
        ranks, longest = deal_to_ranks(records)
        orders = []
        for r, recs in enumerate(ranks):
            g = SplitMix64(mix((s0 + (r + 1) * GAMMA) & M64))
            recs = list(recs)
            shuffle(recs, g)
            orders.append(draw(recs, g))
        return orders, longest
    records = list(range(nrec))
    shuffle(records, e)
    ranks, longest = deal_to_ranks(records)
    return [draw(recs, SplitMix64(mix((e.state + (r + 1) * GAMMA) & M64))) for r, recs in enumerate(ranks)], longest


def epoch_order(store, seed, epoch, rank=0, world=1, window=4, deal="stable"):
    """The lines of /.fidelity/order/epoch-N[.rank-R-of-W]: the rank's own order, padded."""
    orders, longest = rank_orders(store, seed, epoch, world, window, deal)
    if not orders:
        return []
    own = orders[rank if rank < len(orders) else rank % len(orders)]
    n = len(own)
    return own + [own[(j - longest) % n] for j in range(n, longest)]
