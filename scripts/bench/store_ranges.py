#!/usr/bin/env python3
"""Prints, for each file of a file-layout store named in a list, the byte range of its record
that the mount reads at a level: "RECORD_PATH OFFSET LENGTH", one a line, in the list's order
(docs/FORMAT.md, "Piece offsets": in a file record a JPEG at level k is the contiguous range of its
pieces 0..k). readbench --ranges reads these with O_DIRECT: what the disk delivers of exactly the
mount's reads, without FUSE.

  store_ranges.py STORE LEVEL LIST     LEVEL: 1..L or full; LIST: paths relative to the root
"""
import os
import sqlite3
import sys


def pieces_sizes(blob):
    """The piece sizes of a files.pieces BLOB (format 2+: LEB128 size, then a u32 checksum)."""
    sizes, i = [], 0
    while i < len(blob):
        size, shift = 0, 0
        while True:
            b = blob[i]
            i += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        sizes.append(size)
        i += 4
    return sizes


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    store, level, listing = sys.argv[1:]
    db = sqlite3.connect(f"file:{os.path.join(store, 'index.sqlite')}?mode=ro", uri=True)
    if db.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()[0] != "4":
        sys.exit("store_ranges.py: not a file-layout store (format 4)")
    dirs = {i: (p, bytes(n).decode()) for i, p, n in db.execute("SELECT id, parent, name FROM dirs")}

    def dir_path(d):
        parts = []
        while d != 0:
            parent, name = dirs[d]
            parts.append(name)
            d = parent
        return "/".join(reversed(parts))

    records = {i: (path, layout) for i, path, layout in db.execute("SELECT id, path, layout FROM records")}
    rows = db.execute("SELECT dir, name, record, slot, pieces FROM files ORDER BY record, slot")
    where = {}
    offset, last_record = 16, None
    for d, name, record, slot, pieces in rows:
        if record != last_record:
            offset, last_record = 16, record
        sizes = pieces_sizes(pieces)
        rel = "/".join(p for p in (dir_path(d), bytes(name).decode()) if p)
        if records[record][1] == 2:  # a file record: pieces back to back
            k = len(sizes) - 1 if level == "full" else min(int(level), len(sizes) - 1)
            where[rel] = (os.path.join(store, records[record][0]), offset, sum(sizes[: k + 1]))
        offset += sum(sizes)
    with open(listing) as f:
        for line in f:
            rel = line.strip()
            if rel:
                path, off, length = where[rel]
                print(path, off, length)


if __name__ == "__main__":
    main()
