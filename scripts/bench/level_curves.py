#!/usr/bin/env python3
"""Bytes and MS-SSIM per level of two stores of the same tree packed with different scan scripts,
for scripts/bench/decode.sh.

  level_curves.py REF_NAME REF_QUALITY.json REF_INSPECT.json NAME QUALITY.json INSPECT.json

QUALITY.json is `fidelityfs quality STORE --json` (MS-SSIM on luma against the source, per level),
INSPECT.json `fidelityfs inspect STORE --json` (the store's JPEG bytes per level). Prints, per
level, each store's bytes as a fraction of the reference's full level and its MS-SSIM; then the
full level's bytes against the reference's and the worst margin of the second store's MS-SSIM
against bytes curve (linear between levels) below the reference's, over their common range.
"""
import json
import sys

import numpy as np


def curve(quality, inspect, ref_full):
    full = inspect["bytes_by_level"][-1]
    return [(b / ref_full, lv["msssim"]["mean"]) for b, lv in zip(inspect["bytes_by_level"], quality["levels"])], full


def margin(cand, ref):
    """Worst (cand - ref) MS-SSIM where both are defined, and the bytes fraction where it is."""
    cx, cy = zip(*cand)
    rx, ry = zip(*ref)
    lo, hi = max(cx[0], rx[0]), min(cx[-1], rx[-1])
    xs = sorted({x for x in cx + rx if lo <= x <= hi} | {lo, hi})
    return min((float(np.interp(x, cx, cy) - np.interp(x, rx, ry)), x) for x in xs)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    ref_name, ref_q, ref_i, name, q, i = sys.argv[1:]
    load = lambda p: json.load(open(p))
    ref_q, ref_i, q, i = load(ref_q), load(ref_i), load(q), load(i)
    ref_full = ref_i["bytes_by_level"][-1]
    ref_curve, _ = curve(ref_q, ref_i, ref_full)
    cand, full = curve(q, i, ref_full)
    print(f"MS-SSIM (luma, against the source; mean of {len(q['files'])} files) and bytes as a fraction of "
          f"{ref_name}'s full level ({ref_i['by_kind']['jpeg']} JPEGs)\n")
    print(f"| level | {ref_name} bytes | {ref_name} MS-SSIM | {name} bytes | {name} MS-SSIM |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for k, ((rb, rm), (cb, cm)) in enumerate(zip(ref_curve, cand), 1):
        print(f"| {k} | {rb:.3f} | {rm:.4f} | {cb:.3f} | {cm:.4f} |")
    m, at = margin(cand, ref_curve)
    print(f"\n{name}: full level {full / ref_full:.4f}x {ref_name}'s bytes (goal <= 1.01); MS-SSIM against bytes "
          f"{'nowhere below' if m >= 0 else 'below'} {ref_name}'s: worst margin {m:+.4f} at {at:.3f} (goal >= 0)")


if __name__ == "__main__":
    main()
