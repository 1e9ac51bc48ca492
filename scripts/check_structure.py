#!/usr/bin/python3
"""Keeps the code's shape: fails on an include that goes up between layers (the rule is the table
"Which layer may include which" in docs/DESIGN.md), a C++ file over 600 lines or a function over
80 (universal-ctags finds them). Prints the include graph between layers.
Usage: scripts/check_structure.py [--graph-only]"""
import collections
import pathlib
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}

root = pathlib.Path(__file__).resolve().parent.parent


def layer_rule():
    """{layer: set of layers it may include}, from DESIGN.md's table."""
    text = (root / "docs/DESIGN.md").read_text()
    section = text.split("## Which layer may include which", 1)
    if len(section) != 2:
        sys.exit("docs/DESIGN.md has no section 'Which layer may include which'")
    rule = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        layer = cells[0].strip("`/")
        rule[layer] = {c.strip("`/ ") for c in cells[1].split(",") if c.strip("`/ ") not in ("", "nothing")}
    if not rule:
        sys.exit("docs/DESIGN.md: the table 'Which layer may include which' is empty")
    return rule


def sources(rule):
    for layer in sorted(rule):
        for f in sorted((root / layer).glob("*")):
            if f.suffix in SUFFIXES:
                yield layer, f


def long_functions(files):
    out = subprocess.run(["ctags", "--fields=+ne", "--c++-kinds=f", "--language-force=C++", "-o", "-",
                          *map(str, files)], capture_output=True, text=True, check=True).stdout
    for row in out.splitlines():
        cols = row.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" in fields and "end" in fields:
            n = int(fields["end"]) - int(fields["line"]) + 1
            if n > MAX_FUNCTION_LINES:
                where = pathlib.Path(cols[1]).relative_to(root)
                yield f"{where}:{fields['line']}: function {cols[0]} has {n} lines (at most {MAX_FUNCTION_LINES})"


def main():
    rule = layer_rule()
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    problems, graph, files = [], collections.Counter(), []
    for layer, f in sources(rule):
        files.append(f)
        lines = f.read_text(errors="replace").splitlines()
        where = f.relative_to(root)
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{where}: {len(lines)} lines (at most {MAX_FILE_LINES})")
        for number, line in enumerate(lines, 1):
            m = include.match(line)
            if not m or m.group(1) == layer or m.group(1) not in rule:
                continue
            graph[(layer, m.group(1))] += 1
            if m.group(1) not in rule[layer]:
                problems.append(f"{where}:{number}: {layer}/ includes {m.group(1)}/, which docs/DESIGN.md does not allow")
    if "--graph-only" not in sys.argv:
        problems += long_functions(files)
    print("includes between layers (#include lines):")
    for layer in sorted(rule):
        targets = [f"{t} {n}" for (l, t), n in sorted(graph.items()) if l == layer]
        print(f"  {layer + '/':9} -> {', '.join(targets) if targets else 'nothing'}")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        sys.exit(f"{len(problems)} problem(s) with the code's shape")


main()
