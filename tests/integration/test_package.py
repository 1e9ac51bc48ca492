"""Installing like a system package (issue #25): the Debian package cpack makes from the build
folder of the binary under test (its files, its dependencies from dpkg-shlibdeps; installed with
dpkg, a mount through `mount -t fuse.fidelityfs` serves the bytes of a plain `fidelityfs mount`),
its man pages and bash completion, docs/MOUNT.md's options table (all generated from the binary's
own tables), the systemd mount unit, and the Python wheel."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, fid_bin, run
from mountutil import daemon_pid, mounted, read_file, walk_files

BUILD = os.path.dirname(os.path.dirname(os.path.abspath(fid_bin())))
# The package's files (dpkg-deb -c names them so), and the link's target.
PACKAGE_FILES = {
    "./usr/bin/fidelityfs",
    "./sbin/mount.fidelityfs",
    "./usr/share/man/man1/fidelityfs.1.gz",
    "./usr/share/man/man8/fidelityfs-mount.8.gz",
    "./usr/share/bash-completion/completions/fidelityfs",
    "./usr/share/doc/fidelityfs/MOUNT.md",
    "./usr/share/doc/fidelityfs/examples/mnt-imagenet.mount",
    "./usr/share/fidelityfs/plot_quality.py",
}
PACKAGE_LINKS = {"./sbin/mount.fuse.fidelityfs": "mount.fidelityfs"}
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # no /usr/local: the package's binary, not a source install's


def _help_section(text, title):
    """The lines of a CLI11 help section ("Options:", "Subcommands:")."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.rstrip() == title:
            inside = True
        elif inside and line and not line.startswith(" "):
            break
        elif inside and line.strip():
            lines.append(line)
    return lines


def subcommands(*path):
    """The subcommands `fidelityfs PATH --help` lists (hidden ones are not listed)."""
    text = run(*path, "--help").stdout
    return [line.split()[0] for line in _help_section(text, "Subcommands:")]


def option_names(*path):
    """The option names (-o, --config, -h, --help ...) `fidelityfs PATH --help` lists."""
    text = run(*path, "--help").stdout
    names = []
    for line in _help_section(text, "Options:"):
        first = line.split()[0]  # "-h,--help", "--jobs", "-o"
        names += [n for n in first.split(",") if n.startswith("-")]
    return names


def command_paths(path=()):
    """Every subcommand path below `path`, depth first: (pack,), ..., (l3,), (l3, encode)."""
    out = []
    for sub in subcommands(*path):
        out.append((*path, sub))
        out += command_paths((*path, sub))
    return out


def parser_mount_options():
    """The -o names the parser knows, from its own message for an unknown one."""
    p = run("mount", "/nonexistent-store", "/nonexistent-mnt", "-o", "no_such_option", check=False)
    assert p.returncode == 2, p.stderr
    return re.search(r"\(known: ([^)]*)\)", p.stderr).group(1).split(", ")


def parser_yaml_keys(tmp_path):
    """The top-level YAML keys the parser knows, from its own message for an unknown one."""
    cfg = tmp_path / "unknown.yaml"
    cfg.write_text("no_such_key: 1\n")
    p = run("mount", "/nonexistent-store", "/nonexistent-mnt", "--config", cfg, check=False)
    assert p.returncode == 2, p.stderr
    return re.search(r"unknown key \(expected ([^)]*)\)", p.stderr).group(1).split(", ")


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    """The package cpack makes from the build folder of the binary under test."""
    config = os.path.join(BUILD, "CPackConfig.cmake")
    assert os.path.isfile(config), f"{BUILD} is not a configured build folder"
    subprocess.run(["cmake", "--build", BUILD, "--target", "fidelityfs", "fidelityfs-docs"], check=True,
                   capture_output=True)
    out = tmp_path_factory.mktemp("deb")
    p = subprocess.run(["cpack", "--config", config, "-B", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    debs = glob.glob(str(out / "*.deb"))
    assert len(debs) == 1, debs
    return debs[0]


@pytest.fixture(scope="module")
def unpacked(deb, tmp_path_factory):
    """The package's files, extracted (dpkg-deb -x), installed nowhere."""
    root = tmp_path_factory.mktemp("unpacked")
    subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    return root


def test_package_name_files_and_modes(deb):
    version = run("--version").stdout.split()[1]
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.basename(deb) == f"fidelityfs_{version}_{arch}.deb"
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    files, links = {}, {}
    for line in listing.splitlines():
        mode, owner, _size, _date, _time, path, *rest = line.split()
        assert owner == "root/root", line
        if mode.startswith("-"):
            files[path] = mode
        elif mode.startswith("l"):
            links[path] = rest[1]  # "-> TARGET"
    assert set(files) == PACKAGE_FILES
    assert links == PACKAGE_LINKS
    assert files["./usr/bin/fidelityfs"] == files["./sbin/mount.fidelityfs"] == "-rwxr-xr-x"


def test_package_depends_on_the_packages_of_its_libraries(deb, unpacked):
    """Depends names the package of every library the binary needs (dpkg-shlibdeps' versioned
    entries), plus fuse3 for fusermount3."""
    fields = subprocess.run(["dpkg-deb", "-f", deb, "Package", "Version", "Depends"], capture_output=True, text=True,
                            check=True).stdout
    assert "Package: fidelityfs" in fields
    depends = re.search(r"^Depends: (.*)$", fields, re.M).group(1)
    entries = [e.strip() for e in depends.split(",")]
    names = {e.split()[0] for e in entries}
    assert "fuse3" in names
    binary = str(unpacked / "usr" / "bin" / "fidelityfs")
    dynamic = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert "libfuse3.so.3" in needed
    resolved = {}  # library name -> its file here, from ldd's "NAME => PATH (ADDR)" and "PATH (ADDR)" lines
    for line in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.splitlines():
        if m := re.match(r"\s*(\S+) => (/\S+)", line) or re.match(r"\s*((/\S+))", line):
            resolved[os.path.basename(m.group(1))] = m.group(2)
    for lib in needed:
        path = os.path.realpath(resolved[lib])
        assert not path.startswith("/usr/local/"), f"{lib} comes from no package: {path}"
        owners = subprocess.run(["dpkg", "-S", os.path.basename(path)], capture_output=True, text=True).stdout
        packages = {line.split(":")[0] for line in owners.splitlines()
                    if os.path.basename(line.split(": ", 1)[1]) == os.path.basename(path)}
        assert packages & names, f"{lib} ({path}, from {packages}) is not in Depends: {depends}"
    versioned = [e for e in entries if e.split()[0] in {"libc6", "libfuse3-3"}]
    assert len(versioned) == 2 and all("(>=" in e for e in versioned), depends


def _package_on_this_machine():
    """Why installing the package would disturb this machine (a fidelityfs installed from
    elsewhere), or ''."""
    status = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", "fidelityfs"], capture_output=True, text=True)
    if "installed" in status.stdout.split():
        return "a fidelityfs package is installed"
    for path in PACKAGE_FILES | set(PACKAGE_LINKS):
        if os.path.lexists(path[1:]):
            return f"{path[1:]} exists"
    return ""


def test_installed_package_mounts_through_mount_t_fuse_fidelityfs(deb, edge_store, tmp_path):
    """dpkg -i, then `mount -t fuse.fidelityfs STORE MNT -o scan_group=3` runs the installed helper,
    which runs the installed binary (found with a system PATH, no FIDELITYFS_BIN): every file reads
    as through a plain `fidelityfs mount -o scan_group=3`. The package is purged at the end."""
    if os.geteuid() != 0:
        pytest.skip("dpkg -i needs root")
    if why := _package_on_this_machine():
        pytest.skip(f"would disturb this machine: {why}")
    p = subprocess.run(["dpkg", "-i", deb], capture_output=True, text=True)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        env = {k: v for k, v in os.environ.items() if k != "FIDELITYFS_BIN"}
        env["PATH"] = SYSTEM_PATH
        plain, packaged = str(tmp_path / "plain"), str(tmp_path / "packaged")
        with mounted(edge_store, plain, "-o", "scan_group=3"):
            expected = {rel: read_file(os.path.join(plain, rel)) for rel in walk_files(plain)}
        argv = ["mount", "-t", "fuse.fidelityfs", edge_store, packaged, "-o", "scan_group=3"]
        with mounted(edge_store, packaged, argv=argv, env=env):
            with open(f"/proc/{daemon_pid(packaged)}/cmdline", "rb") as f:
                assert f.read().split(b"\0")[0] == b"/usr/bin/fidelityfs"
            got = {rel: read_file(os.path.join(packaged, rel)) for rel in walk_files(packaged)}
            jpegs = [rel for rel in got if os.getxattr(os.path.join(packaged, rel), "user.fidelity.kind") == b"jpeg"]
            assert jpegs
            assert {os.getxattr(os.path.join(packaged, rel), "user.fidelity.scan_group") for rel in jpegs} == {b"3"}
        assert got == expected
    finally:
        purge = subprocess.run(["dpkg", "--purge", "fidelityfs"], capture_output=True, text=True)
        assert purge.returncode == 0, purge.stdout + purge.stderr
    assert _package_on_this_machine() == ""


def render_man(page):
    """The page as `man -l` renders it in plain text, with groff's warnings on; asserts it renders
    cleanly."""
    env = {**os.environ, "LC_ALL": "C", "MANWIDTH": "100"}
    p = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return p.stdout


def has_word(text, word):
    return re.search(r"(?<![\w.-])" + re.escape(word) + r"(?![\w-])", text) is not None


def test_man_page_of_the_commands_names_every_subcommand_and_option(unpacked):
    text = render_man(unpacked / "usr/share/man/man1/fidelityfs.1.gz")
    assert text.startswith("FIDELITYFS(1)")
    paths = command_paths()
    assert ("mount",) in paths and ("l3", "encode") in paths
    for path in paths:
        assert "fidelityfs " + " ".join(path) in text, path
        for name in option_names(*path):
            assert has_word(text, name), (path, name)
    for name in option_names():
        assert has_word(text, name), name
    for name in parser_mount_options():  # mount's -o help lists them
        assert has_word(text, name), name
    assert "fidelityfs doc" not in text  # hidden


def test_man_page_of_the_mount_names_every_mount_option_and_key(unpacked, tmp_path):
    text = render_man(unpacked / "usr/share/man/man8/fidelityfs-mount.8.gz")
    assert text.startswith("FIDELITYFS-MOUNT(8)")
    assert "mount -t fuse.fidelityfs" in text
    options = parser_mount_options()
    assert "scan_group" in options and "allow_other" in options
    for name in options + parser_yaml_keys(tmp_path) + option_names("mount"):
        assert has_word(text, name), name
    # More than --help: what a user of a mount reads about, in sections of their own.
    headings = [line for line in text.splitlines() if re.match(r"^[A-Z][A-Z -]+$", line)]
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "MOUNT OPTIONS", "EXTENDED ATTRIBUTES", "THE CONTROL FOLDER",
                    "ENVIRONMENT", "FILES", "EXAMPLES", "EXIT STATUS", "SEE ALSO"):
        assert heading in headings, (heading, headings)
    for word in ("user.fidelity.scan_group", "user.fidelity.order_seed", "MOUNTPOINT/.fidelity/stats",
                 "MOUNTPOINT/.fidelity/sg/K/", "XDG_CACHE_HOME", "AWS_PROFILE", "fidelityfs.log", "setfattr",
                 "nonempty"):
        assert word in text, word


def test_mount_help_lists_every_mount_option():
    text = run("mount", "--help").stdout
    for name in parser_mount_options():
        assert re.search(rf"^\s*{re.escape(name)}(=|$)", text, re.M), name


def table_defaults():
    """{option: its default as docs/MOUNT.md's table shows it} for every setting whose default is a
    value (`fidelityfs doc mount-options`: "| `threads` | `threads` | `1`..`1024` (`16`): ...")."""
    table = run("doc", "mount-options").stdout
    return {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)` \| `\w+` \| [^|]*? \(`([^`]*)`\): ", table, re.M)}


def byte_count(text):
    """ "10GiB" -> 10737418240, as the parser reads it."""
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB|TiB)?", text)
    return int(m[1]) << {None: 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]


def test_defaults_agree_in_help_man_page_and_config(edge_store, tmp_path):
    """A setting's default is written once (config::Settings) and rendered everywhere: the table,
    `mount --help`, fidelityfs-mount(8) and a default mount's /.fidelity/config show the same one."""
    defaults = table_defaults()
    assert defaults["threads"] == "16" and defaults["disk_cache_size"] == "10GiB" and defaults["scan_group"] == "full"
    assert set(defaults) >= {"cache", "gpu", "readdir", "addressing", "remote_requests", "level_changes"}
    help_text = run("mount", "--help").stdout
    man = run("doc", "man8").stdout
    mnt = tmp_path / "m"
    mnt.mkdir()
    with mounted(edge_store, str(mnt)):
        conf = json.loads(read_file(os.path.join(mnt, ".fidelity", "config")))
    for name, default in defaults.items():
        assert re.search(rf"^\s*{re.escape(name)}=.* \({re.escape(default)}\)\s*$", help_text, re.M), (name, default)
        roff = default.replace("-", "\\-")
        assert re.search(rf"^\\fB{re.escape(name)}\\fR\n.* \(\\fB{re.escape(roff)}\\fR\): ", man, re.M), (name, default)
        value = conf[name]
        assert (value == byte_count(default)) if isinstance(value, int) else (value == default), (name, value, default)


def complete(unpacked, line):
    """What the installed bash completion offers for `line`, the cursor at its end: bash is run
    with the completion sourced and the COMP_* variables set as bash sets them (words split at
    blanks and at COMP_WORDBREAKS' '=' and ':')."""
    words = []
    for token in line.split():
        words += re.findall(r"[^=:]+|[=:]+", token)
    if line.endswith(" "):
        words.append("")
    script = r'''
source "$1"; line=$2; shift 2
spec=$(complete -p fidelityfs) || exit 3
fn=${spec#*-F }; fn=${fn%% *}
COMP_LINE=$line COMP_POINT=${#line} COMP_WORDS=("$@") COMP_CWORD=$(($# - 1))
"$fn" fidelityfs "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
'''
    completion = unpacked / "usr/share/bash-completion/completions/fidelityfs"
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash", str(completion), line, *words],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return [c for c in p.stdout.split("\n") if c]


def test_bash_completion_offers_subcommands_options_and_mount_options(unpacked):
    assert set(complete(unpacked, "fidelityfs ")) == set(subcommands())
    assert "doc" not in complete(unpacked, "fidelityfs ")
    assert set(complete(unpacked, "fidelityfs l3 ")) == set(subcommands("l3"))
    for path in command_paths():
        line = "fidelityfs " + " ".join(path) + " -"
        assert set(complete(unpacked, line)) == set(option_names(*path)), path
    assert complete(unpacked, "fidelityfs pack --j") == ["--jobs"]
    options = parser_mount_options()
    offered = complete(unpacked, "fidelityfs mount /data/s /mnt/s -o ")
    assert {o.rstrip("=") for o in offered} == set(options)
    assert "allow_other" in offered and "scan_group=" in offered
    # The last item of a list; bash replaces its own word, what follows the last '='.
    assert complete(unpacked, "fidelityfs mount /data/s /mnt/s -o scan_group=3,thr") == ["3,threads="]
    assert complete(unpacked, "fidelityfs mount /data/s /mnt/s -o rand") == ["random_reads="]
    # Values: a mount option's keywords after its '=', a command's choices after the option.
    # (Right after '=' bash's own word is "=", which the candidates replace.)
    assert set(complete(unpacked, "fidelityfs mount /data/s /mnt/s -o scan_group=")) == \
        {f"={k}" for k in range(1, 11)} | {"=full"}
    assert set(complete(unpacked, "fidelityfs mount /data/s /mnt/s -o readdir=p")) == {"plus", "plain"}
    assert set(complete(unpacked, "fidelityfs mount /data/s /mnt/s -o scan_group=3,gpu=o")) == {"on", "off"}
    assert complete(unpacked, "fidelityfs mount /data/s /mnt/s -o cache=") == []  # a free value
    assert set(complete(unpacked, "fidelityfs pack --levels ")) == {"pcr", "fast"}
    assert set(complete(unpacked, "fidelityfs verify --progress ")) == {"auto", "on", "off"}


def test_mount_md_options_table_is_the_generated_one():
    """docs/MOUNT.md's options table is `fidelityfs doc mount-options` (regenerate it with that)."""
    with open(os.path.join(REPO, "docs", "MOUNT.md")) as f:
        text = f.read()
    section = text[text.index("### Options"):]
    table = re.search(r"^\|.*?\n(?!\|)", section, re.M | re.S).group(0)
    assert table == run("doc", "mount-options").stdout


def test_systemd_mount_unit_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("no systemd-analyze")
    unit = os.path.join(REPO, "packaging", "systemd", "mnt-imagenet.mount")
    with open(unit) as f:
        text = f.read()
    assert "Type=fuse.fidelityfs" in text and "Where=/mnt/imagenet" in text
    # docs/MOUNT.md shows the unit as it is, less its comments.
    with open(os.path.join(REPO, "docs", "MOUNT.md")) as f:
        shown = re.search(r"```ini\n(.*?)```", f.read(), re.S).group(1)
    assert shown == "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    # --man=no: its Documentation= page is the package's, not installed here.
    p = subprocess.run([analyze, "verify", "--man=no", unit], capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "" and p.stdout == "", p.stdout + p.stderr


def test_python_wheel_builds_offline_and_installs(tmp_path):
    """`pip wheel --no-deps --no-build-isolation ./python` with Debian's setuptools and wheel; the
    wheel installs with pip and imports from there, python/ nowhere on the path."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "python"), src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    wheels = tmp_path / "wheels"
    p = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    import fidelityfs
    built = [os.path.basename(w) for w in glob.glob(str(wheels / "*.whl"))]
    assert built == [f"fidelityfs-{fidelityfs.__version__}-py3-none-any.whl"]
    target = tmp_path / "site"
    p = subprocess.run([*pip, "install", "--no-index", "--no-deps", "--target", str(target), str(wheels / built[0])],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    code = "import fidelityfs, fidelityfs.levels, fidelityfs.stats; print(fidelityfs.__file__, fidelityfs.__version__)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": str(target)}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(target / "fidelityfs" / "__init__.py"), fidelityfs.__version__]


def test_quality_plot_runs_from_the_package(unpacked, edge_tree, tmp_path):
    """`quality --plot` finds plot_quality.py where the package puts it (BIN/../share/fidelityfs),
    not in a source tree: the unpacked binary draws the PNG with FIDELITYFS_SCRIPTS unset."""
    binary = str(unpacked / "usr" / "bin" / "fidelityfs")
    env = {k: v for k, v in os.environ.items() if k != "FIDELITYFS_SCRIPTS"}
    # Three of the zoo's 640x480 JPEGs: what is tested is where the script is found, not the zoo.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("rgb420.jpg", "rgb444.jpg", "gray.jpg"):
        shutil.copy(os.path.join(edge_tree, "jpeg", name), src / name)
    store = tmp_path / "store"
    p = subprocess.run([binary, "pack", str(src), str(store), "--progress", "off"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    png = tmp_path / "q.png"
    p = subprocess.run([binary, "quality", str(store), "--sample", "10", "--progress", "off", "--plot", str(png)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert f"plot: {png}" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
