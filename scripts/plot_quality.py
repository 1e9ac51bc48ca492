#!/usr/bin/env python3
"""Plots what `fidelityfs quality --json` measured: bytes read (fraction of full) against MS-SSIM
at each level, the mean as a line and the worst 5% (5th percentile) below it, with the target.
`fidelityfs quality --plot OUT.png` runs it; it also runs by hand. Needs python3-matplotlib.

  scripts/plot_quality.py RESULTS.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} RESULTS.json OUT.png")
    results = json.load(open(sys.argv[1]))
    levels = results["levels"]
    x = [l["bytes_fraction"] for l in levels]
    mean = [l["msssim"]["mean"] for l in levels]
    p5 = [l["msssim"]["p5"] for l in levels]
    target = results["target"]["msssim"]
    recommended = results["recommended"]

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(x, mean, "o-", color="#37a", label="MS-SSIM, mean")
    ax.plot(x, p5, "v--", color="#a73", label="MS-SSIM, worst 5% (p5)")
    for l, xi, yi in zip(levels, x, mean):
        ax.annotate(str(l["level"]), (xi, yi), textcoords="offset points", xytext=(-4, 6), fontsize=8)
    ax.axhline(target, color="#999", linewidth=1, linestyle=":", label=f"target {target:g}")
    rec = levels[recommended - 1]
    ax.plot([rec["bytes_fraction"]], [rec["msssim"]["mean"]], "o", markersize=12, markerfacecolor="none",
            markeredgecolor="#3a7", markeredgewidth=2, label=f"recommended: level {recommended}")
    ax.set_xlabel("bytes read / bytes at full level")
    ax.set_ylabel("MS-SSIM against full (luma)")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(min(min(p5), target) - 0.02, 1.005)
    ax.set_title(f"Quality per level, {results['sample']} of {results.get('jpeg_files', results['sample'])} JPEGs")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
