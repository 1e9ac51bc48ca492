#!/usr/bin/python3
"""Scan scripts that decode fast: a study tool (groundwork for `pack --levels`, issue #17).

  /usr/bin/python3 scripts/bench/decode_scripts.py DIR [--count N] [--jobs J] [--passes P]
                                                   [--candidates pcr,spectral,...] [--json FILE]

For every candidate scan script, on the YCbCr JPEGs under DIR (sorted, the first --count):

* transcodes each source losslessly with `jpegtran -copy all -optimize -scans SCRIPT`
  (`-progressive` for `pcr`, libjpeg's standard script, which the project's `ycbcr` script
  reproduces); a candidate is a list of 10 levels, each a list of scans in jpegtran's scans-file
  syntax;
* cuts level k = the transcoded file up to the end of the last scan of group k, plus EOI (FF D9);
  scan boundaries come from parsing the markers (an SOS's entropy-coded data runs up to the next
  marker that is neither a stuffed FF 00 nor RSTn);
* checks: the number of SOS equals the script's scans; level 10 is the whole file; level 10
  decodes to exactly the source's pixels (every file); every level decodes with Pillow
  (`load()` raises on truncated data) and with `djpeg` with an empty stderr (no libjpeg warning);
* measures per level: bytes fraction (level-k bytes over full-level bytes, each summed over the
  sample), MS-SSIM against the full level's pixels on BT.601 luma (mean and 5th percentile;
  Wang, Simoncelli and Bovik 2003 over scipy's Gaussian filter, as `fidelityfs quality` and
  tests/integration/test_quality.py compute it), and Pillow decode time per image:
  `Image.open(BytesIO(b)).load()` (full decode to RGB by libjpeg-turbo, defaults), one thread,
  the best of --passes passes over the sample; the source JPEGs (baseline) are timed in every
  pass, interleaved with the levels, and each level's time is also given over the baseline's;
* compares each candidate with `pcr`: its full-level bytes, and its MS-SSIM-against-bytes curve
  (bytes as a fraction of pcr's full bytes; both curves linear between levels, compared at every
  level of both on the common range): the worst margin (candidate - pcr) and where.

The MS-SSIM and the checks use --jobs processes; the timing runs after them in this process
alone. Needs Debian's python3-pil, python3-numpy, python3-scipy and libjpeg-turbo-progs.
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image
from scipy.ndimage import gaussian_filter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pillow_decode import decode_pass  # noqa: E402

LEVELS = 10

# A candidate: 10 levels, each a list of scans ("components: Ss-Se, Ah, Al;"). Components are
# 0 = Y, 1 = Cb, 2 = Cr. Every candidate codes every coefficient bit, so level 10 is lossless.
CANDIDATES = {
    # libjpeg's standard script (jpeg_simple_progression), one scan per level: the project's ycbcr.
    "pcr": [
        ["0,1,2: 0-0, 0, 1;"],
        ["0: 1-5, 0, 2;"],
        ["2: 1-63, 0, 1;"],
        ["1: 1-63, 0, 1;"],
        ["0: 6-63, 0, 2;"],
        ["0: 1-63, 2, 1;"],
        ["0,1,2: 0-0, 1, 0;"],
        ["2: 1-63, 1, 0;"],
        ["1: 1-63, 1, 0;"],
        ["0: 1-63, 1, 0;"],
    ],
    # The shipped `fast` family's ycbcr_fast (pack --levels fast): spectral selection only, DC
    # and AC 1-9 of every component complete at level 5.
    "fast": [
        ["0,1,2: 0-0, 0, 0;"],
        ["0: 1-2, 0, 0;"],
        ["0: 3-5, 0, 0;"],
        ["2: 1-9, 0, 0;", "1: 1-9, 0, 0;"],
        ["0: 6-9, 0, 0;"],
        ["0: 10-14, 0, 0;"],
        ["0: 15-20, 0, 0;"],
        ["0: 21-27, 0, 0;", "2: 10-63, 0, 0;", "1: 10-63, 0, 0;"],
        ["0: 28-40, 0, 0;"],
        ["0: 41-63, 0, 0;"],
    ],
    # Spectral selection only (Ah = Al = 0), 10 scans, one a level.
    "spectral": [
        ["0,1,2: 0-0, 0, 0;"],
        ["0: 1-2, 0, 0;"],
        ["0: 3-5, 0, 0;"],
        ["2: 1-63, 0, 0;"],
        ["1: 1-63, 0, 0;"],
        ["0: 6-9, 0, 0;"],
        ["0: 10-14, 0, 0;"],
        ["0: 15-20, 0, 0;"],
        ["0: 21-35, 0, 0;"],
        ["0: 36-63, 0, 0;"],
    ],
    # One refinement pass, on luma AC only (its last bit, the largest part); DC and chroma are
    # sent whole.
    "fewer-refinements": [
        ["0,1,2: 0-0, 0, 0;"],
        ["0: 1-5, 0, 1;"],
        ["2: 1-63, 0, 0;"],
        ["1: 1-63, 0, 0;"],
        ["0: 6-14, 0, 1;"],
        ["0: 15-63, 0, 1;"],
        ["0: 1-5, 1, 0;"],
        ["0: 6-14, 1, 0;"],
        ["0: 15-35, 1, 0;"],
        ["0: 36-63, 1, 0;"],
    ],
    # Spectral selection only; DC, then luma in fine bands with both chroma components in one
    # level early (they are small), luma split finer at low frequencies.
    "dc-bands": [
        ["0,1,2: 0-0, 0, 0;"],
        ["0: 1-2, 0, 0;"],
        ["0: 3-5, 0, 0;"],
        ["1: 1-63, 0, 0;", "2: 1-63, 0, 0;"],
        ["0: 6-9, 0, 0;"],
        ["0: 10-14, 0, 0;"],
        ["0: 15-20, 0, 0;"],
        ["0: 21-27, 0, 0;"],
        ["0: 28-40, 0, 0;"],
        ["0: 41-63, 0, 0;"],
    ],
    # pcr with chroma sent whole (no chroma refinement scans); luma and DC as pcr.
    "pcr-whole-chroma": [
        ["0,1,2: 0-0, 0, 1;"],
        ["0: 1-5, 0, 2;"],
        ["2: 1-63, 0, 0;"],
        ["1: 1-63, 0, 0;"],
        ["0: 6-63, 0, 2;"],
        ["0: 1-63, 2, 1;"],
        ["0,1,2: 0-0, 1, 0;"],
        ["0: 1-5, 1, 0;"],
        ["0: 6-14, 1, 0;"],
        ["0: 15-63, 1, 0;"],
    ],
    # DC and luma 1-14 coarse (Al 1) with one refinement each, chroma whole, luma 15-63 by
    # spectral selection only: refinement scans only over short bands.
    "hybrid14": [
        ["0,1,2: 0-0, 0, 1;"],
        ["0: 1-5, 0, 1;"],
        ["2: 1-63, 0, 0;"],
        ["1: 1-63, 0, 0;"],
        ["0: 6-14, 0, 1;"],
        ["0,1,2: 0-0, 1, 0;"],
        ["0: 1-14, 1, 0;"],
        ["0: 15-27, 0, 0;"],
        ["0: 28-40, 0, 0;"],
        ["0: 41-63, 0, 0;"],
    ],
}
STANDARD = "pcr"  # transcoded with -progressive

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
EOI = b"\xff\xd9"


# ---------------------------------------------------------------------------------------------
# JPEG markers


def scan_ends(data):
    """End offsets of each scan's entropy-coded data (the offset of the marker after it), and the
    offset of EOI. Raises ValueError on anything unexpected."""
    if data[:2] != b"\xff\xd8":
        raise ValueError("no SOI")
    i, n, ends = 2, len(data), []
    while True:
        if i + 1 >= n or data[i] != 0xFF:
            raise ValueError(f"expected a marker at {i}")
        while i + 1 < n and data[i + 1] == 0xFF:  # fill bytes
            i += 1
        if i + 1 >= n:
            raise ValueError("truncated marker")
        m = data[i + 1]
        if m == 0xD9:
            return ends, i
        if m == 0x01 or 0xD0 <= m <= 0xD7:  # TEM, RSTn outside a scan: no length
            i += 2
            continue
        if i + 4 > n:
            raise ValueError("truncated segment")
        seg = int.from_bytes(data[i + 2:i + 4], "big")
        if seg < 2 or i + 2 + seg > n:
            raise ValueError(f"bad segment length at {i}")
        i += 2 + seg
        if m != 0xDA:
            continue
        # Entropy-coded data: up to the next FF that is followed by neither 00 nor D0..D7
        # (nor more FFs, which are fill before a marker).
        while True:
            j = data.find(b"\xff", i)
            if j < 0 or j + 1 >= n:
                raise ValueError("scan data runs to the end of the file")
            k = j + 1
            while k < n and data[k] == 0xFF:
                k += 1
            if k >= n:
                raise ValueError("scan data runs to the end of the file")
            if data[k] == 0x00 or 0xD0 <= data[k] <= 0xD7:
                i = k + 1
                continue
            ends.append(j)
            i = j
            break


def level_cuts(data, candidate):
    """Offsets where levels 1..10 end in a transcoded file of this candidate."""
    ends, eoi = scan_ends(data)
    counts = [len(level) for level in candidate]
    if len(ends) != sum(counts):
        raise ValueError(f"{len(ends)} scans, the script has {sum(counts)}")
    if eoi != len(data) - 2 or ends[-1] != eoi:
        raise ValueError("data after the last scan")
    cuts, s = [], 0
    for c in counts:
        s += c
        cuts.append(ends[s - 1])
    return cuts


def level_bytes(data, cuts, k):
    return data[:cuts[k - 1]] + EOI


# ---------------------------------------------------------------------------------------------
# MS-SSIM (Wang, Simoncelli, Bovik 2003) on luma, the reference image's filtered terms cached


def blur(a):
    return gaussian_filter(a, sigma=1.5, mode="reflect", truncate=3.5)


def pool(a):
    h2, w2 = a.shape[0] // 2, a.shape[1] // 2
    return (a[0:2 * h2:2, 0:2 * w2:2] + a[0:2 * h2:2, 1:2 * w2:2] + a[1:2 * h2:2, 0:2 * w2:2] +
            a[1:2 * h2:2, 1:2 * w2:2]) / 4


class Reference:
    def __init__(self, x):
        self.scales = 1
        while self.scales < 5 and min(x.shape[0] >> self.scales, x.shape[1] >> self.scales) >= 11:
            self.scales += 1
        self.w = np.array(WEIGHTS[:self.scales]) / sum(WEIGHTS[:self.scales])
        self.pyr = []
        for i in range(self.scales):
            if i:
                x = pool(x)
            ux = blur(x)
            self.pyr.append((x, ux, blur(x * x) - ux * ux))

    def msssim(self, y):
        value = 1.0
        for i, (x, ux, vx) in enumerate(self.pyr):
            if i:
                y = pool(y)
            uy = blur(y)
            vy, vxy = blur(y * y) - uy * uy, blur(x * y) - ux * uy
            if i == self.scales - 1:
                t = (2 * ux * uy + C1) * (2 * vxy + C2) / ((ux ** 2 + uy ** 2 + C1) * (vx + vy + C2))
            else:
                t = (2 * vxy + C2) / (vx + vy + C2)
            value *= max(t[5:-5, 5:-5].mean(), 0.0) ** self.w[i]
        return value


def pixels(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im.mode, np.asarray(im)


def luma(a):
    a = a.astype(np.float64)
    if a.ndim == 2:
        return a
    return 0.299 * a[..., 0] + 0.587 * a[..., 1] + 0.114 * a[..., 2]


# ---------------------------------------------------------------------------------------------
# Per-file work (in a worker process)


def transcode(path, name, script_file):
    args = ["jpegtran", "-copy", "all", "-optimize"]
    args += ["-progressive"] if name == STANDARD else ["-scans", script_file]
    p = subprocess.run(args + [path], capture_output=True)
    if p.returncode != 0 or p.stderr:
        raise ValueError(f"jpegtran ({name}): rc {p.returncode} {p.stderr.decode(errors='replace').strip()}")
    return p.stdout


def djpeg_clean(data):
    p = subprocess.run(["djpeg", "-outfile", os.devnull], input=data, capture_output=True)
    return p.returncode == 0 and not p.stderr


def work_file(args):
    path, names, script_files = args
    src = open(path, "rb").read()
    mode, base = pixels(src)
    out = {"path": path, "source_bytes": len(src), "cands": {}}
    if mode != "RGB":
        out["skip"] = f"mode {mode}"
        return out
    ref = Reference(luma(base))
    for name in names:
        full = transcode(path, name, script_files[name])
        cuts = level_cuts(full, CANDIDATES[name])
        r = {"full": full, "cuts": cuts, "sizes": [], "msssim": [], "warnings": 0}
        for k in range(1, LEVELS + 1):
            b = level_bytes(full, cuts, k)
            if k == LEVELS and b != full:
                raise ValueError(f"{path} {name}: level 10 is not the whole file")
            m, a = pixels(b)
            if k == LEVELS:
                if m != mode or not np.array_equal(a, base):
                    raise ValueError(f"{path} {name}: level 10 pixels differ from the source's")
                r["msssim"].append(1.0)
            else:
                r["msssim"].append(ref.msssim(luma(a)))
            r["sizes"].append(len(b))
            if not djpeg_clean(b):
                r["warnings"] += 1
        out["cands"][name] = r
    return out


def interp(xs, ys, x):
    return float(np.interp(x, xs, ys))


def curve_margin(cand, pcr):
    """Worst (candidate - pcr) MS-SSIM over the common bytes range; both are lists of
    (bytes, msssim) points, linear in between. Returns (margin, bytes fraction where)."""
    cx, cy = zip(*cand)
    px, py = zip(*pcr)
    lo = max(cx[0], px[0])
    xs = sorted({x for x in cx + px if x >= lo})
    worst = min((interp(cx, cy, x) - interp(px, py, x), x) for x in xs)
    return worst


def parse_args():
    """The arguments, and the candidates' names with pcr first."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--json", help="write the figures as JSON to this file")
    a = ap.parse_args()
    names = a.candidates.split(",")
    if names[0] != STANDARD:
        names = [STANDARD] + [n for n in names if n != STANDARD]
    for n in names:
        if n not in CANDIDATES or len(CANDIDATES[n]) != LEVELS:
            sys.exit(f"unknown or malformed candidate {n}")
    return a, names


def write_scripts(tmp, names):
    """{name: path of its jpegtran scans file in tmp}."""
    script_files = {}
    for n in names:
        script_files[n] = os.path.join(tmp, n + ".txt")
        with open(script_files[n], "w") as f:
            for k, level in enumerate(CANDIDATES[n], 1):
                f.write(f"# level {k}\n" + "\n".join(level) + "\n")
    return script_files


def time_decodes(results, names, passes):
    """{(candidate, level) or ("baseline", 0): best decode seconds over passes of the sample}.
    Every pass times the source JPEGs and every (candidate, level), interleaved."""
    configs = [("baseline", 0)] + [(n, k) for n in names for k in range(1, LEVELS + 1)]
    best = {c: float("inf") for c in configs}
    for r in results:  # warm-up, untimed
        Image.open(r["path"]).load()
    for _ in range(passes):
        for c in configs:
            if c[0] == "baseline":
                bufs = [open(r["path"], "rb").read() for r in results]
            else:
                bufs = [level_bytes(r["cands"][c[0]]["full"], r["cands"][c[0]]["cuts"], c[1]) for r in results]
            best[c] = min(best[c], decode_pass(bufs))
            del bufs
    return best


def summarize(results, names, best):
    """{candidate: its figures}: bytes, MS-SSIM and decode time per level, and against pcr."""
    summary, curves = {}, {}
    base_t = best[("baseline", 0)]
    src_total = sum(r["source_bytes"] for r in results)
    for n in names:
        sizes = np.array([r["cands"][n]["sizes"] for r in results], dtype=np.float64)
        ms = np.array([r["cands"][n]["msssim"] for r in results])
        warn = sum(r["cands"][n]["warnings"] for r in results)
        full = sizes[:, -1].sum()
        rows = []
        for k in range(1, LEVELS + 1):
            t = best[(n, k)]
            rows.append({"level": k, "bytes_fraction": sizes[:, k - 1].sum() / full,
                         "msssim_mean": ms[:, k - 1].mean(), "msssim_p5": float(np.percentile(ms[:, k - 1], 5)),
                         "decode_us": t * 1e6, "decode_vs_baseline": t / base_t})
        summary[n] = {"full_bytes": full, "scans": sum(len(x) for x in CANDIDATES[n]), "djpeg_warnings": warn,
                      "levels": rows}
    pcr_full = summary[STANDARD]["full_bytes"]
    for n in names:
        s = summary[n]
        curves[n] = [(s["full_bytes"] / pcr_full * row["bytes_fraction"], row["msssim_mean"]) for row in s["levels"]]
    for n in names:
        s = summary[n]
        s["full_vs_pcr"] = s["full_bytes"] / pcr_full
        s["full_vs_source"] = s["full_bytes"] / src_total
        if n != STANDARD:
            s["curve_margin"], s["curve_margin_at"] = curve_margin(curves[n], curves[STANDARD])
    return summary


def print_candidate(n, s, files):
    print(f"\n### {n}: {s['scans']} scans; full level {s['full_bytes'] / files / 1e3:.2f} kB/file mean, "
          f"{s['full_vs_pcr']:.4f}x pcr's, {s['full_vs_source']:.4f}x the sources'; "
          f"level files with djpeg warnings: {s['djpeg_warnings']}")
    print("script: " + " | ".join(" ".join(level) for level in CANDIDATES[n]))
    if n != STANDARD:
        m = s["curve_margin"]
        print(f"MS-SSIM vs bytes (fraction of pcr's full) against pcr's: "
              f"{'nowhere below' if m >= 0 else 'BELOW'}; worst margin {m:+.4f} at {s['curve_margin_at']:.3f}")
    print("\n| level | bytes / full | MS-SSIM mean | MS-SSIM p5 | decode us/image | vs baseline |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in s["levels"]:
        print(f"| {row['level']} | {row['bytes_fraction']:.3f} | {row['msssim_mean']:.4f} | {row['msssim_p5']:.4f} "
              f"| {row['decode_us']:.0f} | {row['decode_vs_baseline']:.2f}x |")


def main():
    a, names = parse_args()
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.dir) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg")))[:a.count]
    tmp = tempfile.mkdtemp(prefix="decode-scripts-")
    script_files = write_scripts(tmp, names)

    # The standard script: -scans with pcr's list gives the same bytes as -progressive.
    if paths:
        p = subprocess.run(["jpegtran", "-copy", "all", "-optimize", "-scans", script_files[STANDARD], paths[0]],
                           capture_output=True, check=True)
        assert p.stdout == transcode(paths[0], STANDARD, None), "pcr's list is not -progressive"

    t0 = time.time()
    with ProcessPoolExecutor(a.jobs) as ex:
        results = list(ex.map(work_file, [(p, names, script_files) for p in paths], chunksize=4))
    skipped = [r for r in results if "skip" in r]
    results = [r for r in results if "skip" not in r]
    print(f"{len(results)} files from {a.dir} ({len(skipped)} skipped: not YCbCr), "
          f"source {sum(r['source_bytes'] for r in results) / len(results) / 1e3:.1f} kB mean; "
          f"checks and MS-SSIM {time.time() - t0:.0f} s with {a.jobs} processes")

    best = time_decodes(results, names, a.passes)
    base_t = best[("baseline", 0)]
    print(f"Pillow decode of the source JPEGs (baseline): {base_t * 1e6:.0f} us/image "
          f"(best of {a.passes} passes, Image.open(BytesIO(b)).load(), one thread)")

    summary = summarize(results, names, best)
    for n in names:
        print_candidate(n, summary[n], len(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dir": a.dir, "files": len(results), "baseline_decode_us": base_t * 1e6,
                       "candidates": summary, "scripts": {n: CANDIDATES[n] for n in names}}, f, indent=1)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
