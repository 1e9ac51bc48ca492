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
        self.dirs = {i: (parent, bytes(name)) for i, parent, name in self.db.execute("SELECT id, parent, name FROM dirs")}
        self.records = {i: (p, layout, size) for i, p, layout, size in
                        self.db.execute("SELECT id, path, layout, size FROM records")}
        region_ends = {i: struct.unpack(f"<{len(b) // 8}Q", b) for i, b in
                       self.db.execute("SELECT id, region_ends FROM records")}
        self.files = {}
        for row in self.db.execute("SELECT id, dir, name, kind, record, slot, source_size, pieces FROM files"):
            fid, d, name, kind, rec, slot, source_size, blob = row
            if self.version == 1:
                pieces = [struct.unpack_from("<QII", blob, i) for i in range(0, len(blob), 16)]
            else:
                pieces = self.sizes_and_checksums(blob)
            rel = self.dir_path(d)
            rel = (rel + "/" if rel else "") + bytes(name).decode("utf-8", "surrogateescape")
            self.files[rel] = dict(id=fid, kind=("jpeg", "l3", "blob")[kind], record=rec, slot=slot,
                                   source_size=source_size, pieces=pieces)
        if self.version >= 2:
            self.derive_offsets(region_ends)
        self.skipped = [(bytes(p).decode("utf-8", "surrogateescape"), r)
                        for p, r in self.db.execute("SELECT path, reason FROM skipped")]

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
        order from the region's start (the header's end, or region k-1's end)."""
        by_record = {}
        for f in self.files.values():
            by_record.setdefault(f["record"], []).append(f)
        for rec, members in by_record.items():
            ends = region_ends[rec]
            pos = [16] + list(ends[:-1])
            for f in sorted(members, key=lambda f: f["slot"]):
                for k, piece in enumerate(f["pieces"]):
                    region = k if self.records[rec][1] == 0 else 0
                    piece[0] = pos[region]
                    pos[region] += piece[1]
            assert pos == list(ends), f"record {rec}: pieces end at {pos}, regions at {ends}"
        for f in self.files.values():
            f["pieces"] = [tuple(p) for p in f["pieces"]]

    def dir_path(self, d):
        parts = []
        while d != 0:
            parent, name = self.dirs[d]
            parts.append(name.decode("utf-8", "surrogateescape"))
            d = parent
        return "/".join(reversed(parts))

    def all_dirs(self):
        return sorted(self.dir_path(d) for d in self.dirs if d != 0)

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
