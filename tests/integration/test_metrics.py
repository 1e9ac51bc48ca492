"""/.fidelity/metrics (the Prometheus text format, read with prometheus_client's own parser) and
`fidelityfs stats MOUNT [--watch]` on a real mount."""
import errno
import json
import os
import subprocess

import pytest

from conftest import fid_bin, run
from mountutil import mounted, walk_files

parser = pytest.importorskip("prometheus_client.parser")


def metrics(mnt):
    with open(os.path.join(mnt, ".fidelity", "metrics")) as f:
        text = f.read()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    return text, families


def value(families, family, name=None, **labels):
    """The one sample of `family` named `name` (default: the family's counter or gauge sample)
    whose labels include `labels`."""
    f = families[family]
    found = [s for s in f.samples
             if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items())
             and (name is not None or not s.name.endswith("_created"))]
    assert len(found) == 1, (family, name, labels, found)
    return found[0].value


def stats(mnt):
    with open(os.path.join(mnt, ".fidelity", "stats")) as f:
        return json.load(f)


def test_metrics_parse_and_agree_with_what_was_read(imagenet_store, mnt):
    with mounted(imagenet_store, mnt, "-o", "scan_group=5"):
        assert "metrics" in os.listdir(os.path.join(mnt, ".fidelity"))
        files = [os.path.join(mnt, rel) for rel in walk_files(mnt)]
        sizes = 0
        for p in files:
            with open(p, "rb") as f:
                sizes += len(f.read())
        text, fam = metrics(mnt)
        s = stats(mnt)
        assert text.endswith("\n")
        for sample in fam["fidelityfs_reads"].samples:
            assert sample.labels["mountpoint"] == os.path.realpath(mnt)
        # Every file once, cold: the bytes served at level 5 are the files' sizes.
        assert value(fam, "fidelityfs_read_bytes", kind="jpeg", level="5") == sizes
        assert value(fam, "fidelityfs_reads", kind="jpeg", level="5") == s["jpeg_reads_by_level"][4] >= len(files)
        assert value(fam, "fidelityfs_reads", kind="jpeg", level="1") == 0
        reads = sum(sm.value for sm in fam["fidelityfs_reads"].samples)
        assert reads == sum(s["reads_by_kind"].values())
        # The histogram: cumulative buckets, +Inf == count == every tree read.
        h = fam["fidelityfs_read_duration_seconds"]
        assert h.type == "histogram"
        buckets = [(float(sm.labels["le"]), sm.value) for sm in h.samples if sm.name.endswith("_bucket")]
        assert buckets == sorted(buckets) and buckets[-1][0] == float("inf")
        assert buckets[-1][1] == value(fam, "fidelityfs_read_duration_seconds",
                                       "fidelityfs_read_duration_seconds_count") == reads
        assert value(fam, "fidelityfs_read_duration_seconds", "fidelityfs_read_duration_seconds_sum") > 0
        assert value(fam, "fidelityfs_storage_bytes") == s["storage_bytes"] > 0
        assert value(fam, "fidelityfs_storage_requests") == s["storage_reads"] > 0
        assert value(fam, "fidelityfs_cache_hits") + value(fam, "fidelityfs_cache_misses") == \
            s["cache_hits"] + s["cache_misses"] > 0
        assert value(fam, "fidelityfs_cache_budget_bytes") == 256 << 20
        assert fam["fidelityfs_cache_bytes"].type == "gauge"
        assert value(fam, "fidelityfs_prefixes_in_flight") >= 0
        assert value(fam, "fidelityfs_default_level") == 5
        assert value(fam, "fidelityfs_eio_errors") == 0
        assert "fidelityfs_disk_cache_hits" not in fam  # a local store has no disk cache
        # Level changes and refusals are counted.
        folder = os.path.dirname(files[0])
        subprocess.run(["setfattr", "-n", "user.fidelity.scan_group", "-v", "2", folder], check=True)
        refused = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                                  "setfattr", "-n", "user.fidelity.scan_group", "-v", "1", folder],
                                 capture_output=True)
        _, fam = metrics(mnt)
        assert value(fam, "fidelityfs_level_changes") == 1
        assert value(fam, "fidelityfs_level_overrides") == 1
        # nobody reaches the tree only with allow_other: refused by FUSE (EACCES) or by us (EPERM).
        assert refused.returncode != 0
        assert value(fam, "fidelityfs_level_changes_refused") == 0


def test_stats_command_summary_and_watch(imagenet_store, mnt):
    with mounted(imagenet_store, mnt, "-o", "scan_group=4"):
        files = [os.path.join(mnt, rel) for rel in walk_files(mnt)]
        p = subprocess.Popen([fid_bin(), "stats", mnt, "--watch", "0.5", "--count", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            header = p.stdout.readline()  # printed after the first snapshot: reads from now on count
            assert header.split()[:3] == ["time", "reads/s", "MB/s"]
            for path in files:
                with open(path, "rb") as f:
                    f.read()
            out = p.stdout.read()  # to the end: the process exits after --count lines
            p.wait(timeout=30)
            errs = p.stderr.read()
        finally:
            p.kill()
        assert p.returncode == 0, errs
        lines = out.strip().splitlines()
        assert len(lines) == 2
        rates = [float(line.split()[1]) for line in lines]
        assert sum(rates) > 0
        assert all(line.split()[-1] == "4" for line in lines)  # the level
        summary = run("stats", mnt).stdout
        reads = sum(stats(mnt)["reads_by_kind"].values())
        assert summary.splitlines()[0].startswith(mnt)
        # The daemon's pid: the process that holds the mount's /dev/fuse and runs `mount`.
        pid = stats(mnt)["pid"]
        assert summary.splitlines()[0].endswith(f"  pid {pid}"), summary
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[1:3] == [b"mount", imagenet_store.encode()], argv
        assert f"default 4 of " in summary
        assert f"reads     {reads} (jpeg {reads}, l3 0, blob 0)" in summary
        assert "by level  4: " in summary
        rr = stats(mnt)["random_reads"]
        assert rr["why"].startswith(rr["mode"]) and f"random    {rr['why']}\n" in summary, summary
        assert "reads that needed stored bytes)" in summary
        # Any path in the mount finds the mount.
        inside = run("stats", files[0]).stdout
        assert inside.splitlines()[0].startswith(mnt), inside
    p = run("stats", os.path.dirname(mnt), check=False)
    assert p.returncode == 2
    assert p.stderr == f"fidelityfs stats: {os.path.dirname(mnt)}: not in a fidelityfs mount\n", p.stderr
    p = run("stats", os.path.join(mnt, "no-such"), check=False)
    assert p.returncode == 2
    assert p.stderr == f"fidelityfs stats: {os.path.join(mnt, 'no-such')}: no such file or folder\n", p.stderr
    # Usage errors name the command and say what is allowed in words.
    p = run("stats", mnt, "--watch", "0", check=False)
    assert p.returncode == 2
    assert p.stderr.startswith("fidelityfs stats: --watch: must be more than 0 seconds, got 0\n"), p.stderr
    p = run("stats", mnt, "--count", "3", check=False)
    assert p.returncode == 2
    assert p.stderr.startswith("fidelityfs stats: --count requires --watch\n"), p.stderr


def test_failed_requests_are_counted_and_a_refused_level_change_is_logged(edge_store, tmp_path, mnt):
    log = tmp_path / "fid.log"
    cfg = tmp_path / "fid.yaml"
    cfg.write_text(f"log:\n  file: {log}\n")
    with mounted(edge_store, mnt, "-o", f"config={cfg}"):
        folder = os.path.dirname(os.path.join(mnt, sorted(walk_files(mnt))[0]))
        bad = subprocess.run(["setfattr", "-n", "user.fidelity.scan_group", "-v", "eleven", folder],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and "Invalid argument" in bad.stderr
        typo = subprocess.run(["setfattr", "-n", "user.fidelity.scangroup", "-v", "3", folder],
                              capture_output=True, text=True)
        assert typo.returncode != 0 and "Operation not supported" in typo.stderr
        with pytest.raises(OSError) as e:
            os.unlink(os.path.join(mnt, sorted(walk_files(mnt))[0]))
        assert e.value.errno == errno.EROFS
        assert not os.path.exists(os.path.join(folder, "no-such-file.jpg"))
        failed = stats(mnt)["request_errors"]
        _, fam = metrics(mnt)
        assert failed["setxattr"] == value(fam, "fidelityfs_request_errors", op="setxattr") == 2
        assert failed["unlink"] == value(fam, "fidelityfs_request_errors", op="unlink") == 1
        # A name that is not there is an answer (a negative entry the kernel keeps), not an error.
        assert failed["lookup"] == value(fam, "fidelityfs_request_errors", op="lookup") == 0
        assert failed["read"] == 0
        # Every request is counted, failed or not: the two setxattr and the unlink among them.
        received = stats(mnt)["requests"]
        assert received["setxattr"] >= 2 and received["unlink"] == 1 and received["lookup"] >= 1, received
    text = log.read_text()
    # The refused change at info, naming the attribute, its value and why; ENOENT and EROFS are
    # for debug logs only.
    assert "user.fidelity.scan_group='eleven': " in text and "(EINVAL)" in text, text
    assert "user.fidelity.scangroup='3': no such attribute: a level is user.fidelity.scan_group" in text, text
    assert "lookup inode" not in text and "unlink inode" not in text, text


def test_cp_copies_the_control_files_and_reading_them_changes_no_count(imagenet_store, mnt, tmp_path):
    """cp stats a path, then opens it: both must meet one snapshot, so reading /.fidelity may not
    change the requests it counts."""
    with mounted(imagenet_store, mnt):
        for name in ("stats", "config", "metrics"):
            out = tmp_path / name
            done = subprocess.run(["cp", os.path.join(mnt, ".fidelity", name), str(out)], capture_output=True, text=True)
            assert done.returncode == 0 and done.stderr == "", done.stderr
            assert out.stat().st_size > 0
        before = stats(mnt)
        after = stats(mnt)
        assert before["requests"] == after["requests"], (before["requests"], after["requests"])
        assert json.loads((tmp_path / "stats").read_text())["pid"] == before["pid"]
