#!/usr/bin/env python3
"""Prints, for each file of a file-layout store named in a list, the byte range of its record
that the mount reads at a level: "RECORD_PATH OFFSET LENGTH", one a line, in the list's order
(docs/FORMAT.md, "Piece offsets": in a file record a JPEG at level k is the contiguous range of its
pieces 0..k). readbench --ranges reads these with O_DIRECT: what the disk delivers of exactly the
mount's reads, without FUSE. The store is read by tests/integration/fidstore.py.

  store_ranges.py STORE LEVEL LIST     LEVEL: 1..L or full; LIST: paths relative to the root
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from fidstore import Store  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, level, listing = sys.argv[1:]
    store = Store(path)
    if store.layout != "file":
        sys.exit("store_ranges.py: not a file-layout store")
    with open(listing) as names:
        for rel in (line.strip() for line in names):
            if not rel:
                continue
            f = store.files[rel]
            k = len(f["pieces"]) - 1 if level == "full" else min(int(level), len(f["pieces"]) - 1)
            first, last = f["pieces"][0], f["pieces"][k]
            print(os.path.join(path, store.records[f["record"]][0]), first[0], last[0] + last[1] - first[0])


if __name__ == "__main__":
    main()
