"""A store is input from strangers, and a command may be run on the wrong one: what is found in a
store never holds a command or the daemon, and nothing a command writes destroys what it reads.
A FIFO in place of a record or of the index is refused at once, naming the file (every command
would otherwise wait for a writer forever). Text from the store reaches the terminal escaped.
relayout refuses a target that is its source (by identity) and an old format it cannot carry.
"""
import os
import shutil
import sqlite3
import subprocess

import pytest
from conftest import fid_bin, index_rows
from mountutil import walk_files

BOUND_S = 30  # a command that meets a hostile store answers long before this


def fid(*args):
    """fidelityfs with args, bounded in time: a hang fails the test instead of holding the suite."""
    try:
        return subprocess.run([fid_bin(), *map(str, args)], capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fidelityfs {' '.join(map(str, args))} still running after {BOUND_S} s")


@pytest.fixture
def store_copy(edge_store, tmp_path):
    dst = tmp_path / "store"
    shutil.copytree(edge_store, dst)
    return dst


def test_a_fifo_in_place_of_a_record_is_refused_at_once(store_copy, mnt):
    (rec,) = index_rows(store_copy, "SELECT path FROM records ORDER BY id LIMIT 1")[0]
    os.remove(store_copy / rec)
    os.mkfifo(store_copy / rec)
    p = fid("verify", store_copy)
    assert p.returncode == 1 and rec in p.stderr + p.stdout and "FIFO" in p.stderr + p.stdout, (p.stdout, p.stderr)
    p = fid("mount", store_copy, mnt)
    try:
        assert p.returncode == 0, p.stderr  # the other records still serve; this one is a problem
        assert rec in p.stderr and "not a regular file (a FIFO)" in p.stderr, p.stderr
        assert walk_files(mnt)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
    p = fid("relayout", store_copy, store_copy.parent / "out", "--layout", "scan", "--progress", "off")
    assert p.returncode != 0 and "FIFO" in p.stderr, (p.returncode, p.stderr)


def test_a_fifo_in_place_of_the_index_is_refused_at_once(store_copy, mnt):
    os.remove(store_copy / "index.sqlite")
    os.mkfifo(store_copy / "index.sqlite")
    for args in (("inspect", store_copy), ("verify", store_copy), ("mount", store_copy, mnt)):
        p = fid(*args)
        assert p.returncode != 0, (args, p.stdout)
        assert "index.sqlite: not a regular file (a FIFO)" in p.stderr, (args, p.stderr)


def test_inspect_prints_the_stores_text_escaped(store_copy):
    forged = "\x1b]0;pwned\x07\x1b[2J\nproblem: none, store is fine"
    db = sqlite3.connect(store_copy / "index.sqlite")
    with db:
        db.execute("UPDATE files SET note = ? WHERE id = (SELECT min(id) FROM files WHERE kind = 2)", (forged,))
        db.execute("INSERT INTO skipped(path, reason) VALUES (?, ?)", (b"a\x1b[31mred.jpg", forged))
    db.close()
    p = fid("inspect", store_copy)
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout, p.stdout
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x0aproblem: none, store is fine" in p.stdout
    assert "skipped: a\\x1b[31mred.jpg: " in p.stdout
    assert not [line for line in p.stdout.splitlines() if line.startswith("problem: none")]


def test_relayout_never_writes_over_the_store_it_reads(store_copy, tmp_path):
    before = sorted(os.listdir(store_copy))
    link = tmp_path / "link"
    os.symlink(store_copy, link)
    for src, out in ((store_copy, store_copy), (store_copy, link), (link, str(store_copy) + "/"),
                     ("s3://bucket/p", "s3://bucket/p/"), ("s3://bucket/a/b", "s3://bucket/a/b")):
        p = fid("relayout", src, out, "--layout", "scan", "--progress", "off")
        assert p.returncode == 2, (src, out, p.stdout, p.stderr)
        assert f"{out}: is the store being relaid out ({src})" in p.stderr, p.stderr
    assert sorted(os.listdir(store_copy)) == before
    assert fid("verify", store_copy).returncode == 0


def test_relayout_of_a_format_2_store_is_refused_before_writing(imagenet_store, tmp_path):
    """Formats 1 and 2 describe records differently from the formats relayout writes: refused,
    naming the format, and nothing is written."""
    old = tmp_path / "old"
    shutil.copytree(imagenet_store, old)
    db = sqlite3.connect(old / "index.sqlite")
    with db:
        db.execute("UPDATE meta SET value = '2' WHERE key = 'format_version'")
        db.execute("UPDATE records SET header_id = id")
        db.execute("ALTER TABLE records DROP COLUMN header_id")
    db.close()
    out = tmp_path / "out"
    p = fid("relayout", old, out, "--layout", "file", "--progress", "off")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "format version 2: relayout writes format 3 or 4" in p.stderr and "nothing was written" in p.stderr, p.stderr
    assert not out.exists()
