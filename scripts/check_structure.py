#!/usr/bin/python3
"""Keeps the code's shape: fails on an include that goes up between layers (the rule is the table
"Which layer may include which" in docs/DESIGN.md), a file over 600 lines or a function over 80.
Product code is the C++ of the layers in that table; scripts/ (recursively: *.sh, *.py and the C++
of scripts/bench) and python/ (*.py) are held to the same two limits. Functions are measured by
universal-ctags for C++, Python's ast for Python, and for shell from `name() {` to the first `}`
indented as that line. Prints the include graph between layers.
Usage: scripts/check_structure.py [--graph-only]"""
import ast
import collections
import pathlib
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
CPP = {".h", ".cpp", ".cu", ".cuh"}
SCRIPT_DIRS = ("scripts", "python")
SHELL_FUNCTION = re.compile(r"^(\s*)(?:function\s+)?([A-Za-z_][\w:-]*)\s*\(\)\s*(\{.*)?$")

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
            if f.suffix in CPP:
                yield layer, f


def script_files():
    """The shell, Python and C++ files under scripts/ and python/, build outputs left out."""
    for d in SCRIPT_DIRS:
        for f in sorted((root / d).rglob("*")):
            parts = f.relative_to(root / d).parts[:-1]
            skip = any(p in ("build", "__pycache__") or p.endswith(".egg-info") for p in parts)
            if f.is_file() and not skip and f.suffix in CPP | {".sh", ".py"}:
                yield f


def cpp_functions(files):
    """(file, name, first line, lines) of each C++ function, from universal-ctags."""
    if not files:
        return
    out = subprocess.run(["ctags", "--fields=+ne", "--c++-kinds=f", "--language-force=C++", "-o", "-",
                          *map(str, files)], capture_output=True, text=True, check=True).stdout
    for row in out.splitlines():
        cols = row.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" in fields and "end" in fields:
            yield pathlib.Path(cols[1]), cols[0], int(fields["line"]), int(fields["end"]) - int(fields["line"]) + 1


def shell_functions(f):
    """`name() {` to the first line that starts with `}` indented as it, or for `name() { body...`
    to the first line that ends with `}` (ctags gives no end for shell)."""
    lines = f.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        m = SHELL_FUNCTION.match(line)
        if not m:
            continue
        inline = re.match(r"\{\s*(#.*)?$", m.group(3) or "{") is None
        end = re.compile(r".*\}\s*(#.*)?$" if inline else re.escape(m.group(1)) + r"\}")
        last = next((j for j in range(i if inline else i + 1, len(lines)) if end.match(lines[j])), None)
        if last is None:
            sys.exit(f"{f.relative_to(root)}:{i + 1}: no closing '}}' for shell function {m.group(2)}")
        yield f, m.group(2), i + 1, last - i + 1


def python_functions(f):
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f, node.name, node.lineno, node.end_lineno - node.lineno + 1


def long_functions(files):
    found = list(cpp_functions([f for f in files if f.suffix in CPP]))
    for f in files:
        if f.suffix == ".sh":
            found += shell_functions(f)
        elif f.suffix == ".py":
            found += python_functions(f)
    for f, name, line, n in found:
        if n > MAX_FUNCTION_LINES:
            yield f"{f.relative_to(root)}:{line}: function {name} has {n} lines (at most {MAX_FUNCTION_LINES})"


def main():
    rule = layer_rule()
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    problems, graph = [], collections.Counter()
    layered = list(sources(rule))
    files = [f for _, f in layered] + list(script_files())
    for f in files:
        lines = f.read_text(errors="replace").splitlines()
        if len(lines) > MAX_FILE_LINES:
            problems.append(f"{f.relative_to(root)}: {len(lines)} lines (at most {MAX_FILE_LINES})")
    for layer, f in layered:
        for number, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = include.match(line)
            if not m or m.group(1) == layer or m.group(1) not in rule:
                continue
            graph[(layer, m.group(1))] += 1
            if m.group(1) not in rule[layer]:
                problems.append(f"{f.relative_to(root)}:{number}: {layer}/ includes {m.group(1)}/, "
                                "which docs/DESIGN.md does not allow")
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
