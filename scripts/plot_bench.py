#!/usr/bin/env python3
"""Plots the figures the benchmarks saved (BENCH_DIR/results/*.json, default
/tmp/fidelityfs-bench) into docs/bench-*.png for the README. Needs python3-matplotlib.

  scripts/bench/pack.sh && scripts/bench/read.sh && scripts/plot_bench.py
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

bench = os.environ.get("BENCH_DIR", "/tmp/fidelityfs-bench")
docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")


def load(name):
    p = os.path.join(bench, "results", name)
    return json.load(open(p)) if os.path.exists(p) else None


def main():
    made = []
    pack = load("pack.json")
    if pack:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
        rates = [pack["files"] / pack["fidelityfs_s"], pack["files"] / pack["jpegtran_loop_s"]]
        jobs = pack.get("jobs", 2)
        a.bar([f"fidelityfs pack\n--jobs {jobs}", f"jpegtran -progressive\nper file, {jobs} at once"], rates,
              color=["#3a7", "#999"])
        a.set_ylabel("images/s")
        a.set_title(f"Pack, {pack['files']} ImageNet-like JPEGs")
        levels = pack["bytes_by_level"]
        b.plot(range(1, len(levels) + 1), [v / levels[-1] for v in levels], "o-", color="#37a")
        b.set_xlabel("level")
        b.set_ylabel("bytes / full")
        b.set_title("Bytes read at each level")
        b.set_xticks(range(1, len(levels) + 1))
        fig.tight_layout()
        out = os.path.join(docs, "bench-pack.png")
        fig.savefig(out, dpi=90)
        made.append(out)
    read = load("read.json")
    if read:
        names = list(read["sources"])
        fig, ax = plt.subplots(figsize=(10, 3.6))
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [read["sources"][n]["warm_fps"] for n in names], 0.4, label="warm")
        ax.bar([i + 0.2 for i in x], [read["sources"][n]["cold_fps"] for n in names], 0.4, label="cold")
        ax.set_xticks(list(x), names)
        ax.set_ylabel("files/s")
        ax.set_title(f"Random-order reads, {read['files']} files, 2 threads")
        ax.legend()
        fig.tight_layout()
        out = os.path.join(docs, "bench-read.png")
        fig.savefig(out, dpi=90)
        made.append(out)
    if not made:
        sys.exit(f"no results in {bench}/results: run scripts/bench/pack.sh and read.sh first")
    print("\n".join(made))


if __name__ == "__main__":
    main()
