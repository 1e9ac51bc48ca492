#!/usr/bin/env python3
"""Lists an ImageFolder tree the way torchvision's ImageFolder does when it is built, and prints
the time it took as one JSON line: {"files": N, "classes": C, "seconds": S}.

With torchvision installed this is torchvision's own code (datasets.folder.find_classes and
make_dataset with IMG_EXTENSIONS): os.scandir of the root keeping entries whose is_dir() is true,
then for each class folder, sorted, os.walk (os.scandir, entry.is_dir()) and a check of each
name's extension. Without torchvision, the same steps written out. Imports are done before the
clock starts. --out FILE writes the files found, relative to ROOT, one a line, in listing order.

  imagefolder_list.py ROOT [--out FILE]
"""
import argparse
import json
import os
import sys
import time

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

try:
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset  # noqa: F811
    HOW = "torchvision"
except ImportError:
    HOW = "mimic"

    def find_classes(directory):
        classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
        return classes, {c: i for i, c in enumerate(classes)}

    def make_dataset(directory, class_to_idx, extensions):
        instances = []
        for target_class in sorted(class_to_idx):
            target_dir = os.path.join(directory, target_class)
            if not os.path.isdir(target_dir):
                continue
            for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
                for fname in sorted(fnames):
                    path = os.path.join(root, fname)
                    if path.lower().endswith(extensions):
                        instances.append((path, class_to_idx[target_class]))
        return instances


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.perf_counter()
    classes, class_to_idx = find_classes(a.root)
    samples = make_dataset(a.root, class_to_idx, extensions=IMG_EXTENSIONS)
    dt = time.perf_counter() - t0
    if a.out:
        n = len(a.root.rstrip("/")) + 1
        with open(a.out, "w") as f:
            f.writelines(p[n:] + "\n" for p, _ in samples)
    print(json.dumps({"files": len(samples), "classes": len(classes), "seconds": round(dt, 4), "how": HOW}))
    return 0 if samples else 1


if __name__ == "__main__":
    sys.exit(main())
