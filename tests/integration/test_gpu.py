"""The GPU path of L3 (cuda/, issue #7): gpu=auto|on|off at mount, --version, and the daemon's
batching and view buffers exercised end to end with gpu=emulate (the block kernel's code run on
the CPU). On a machine with a CUDA device, gpu=on is checked against the CPU decoder too."""
import json
import os
import subprocess

import pytest

from conftest import REPO, fid_bin, manifest
from mountutil import mounted, read_all


def version():
    return subprocess.run([fid_bin(), "--version"], capture_output=True, text=True, check=True).stdout


def has_device():
    return "device:" in version()


def lossless_files(tree):
    return [r["path"] for r in manifest(tree) if r["expectation"] == "lossless"]


def test_version_says_what_was_built_and_found():
    out = version()
    assert out.startswith("fidelityfs ")
    # One of the three states, never silence.
    assert ("CUDA not built in" in out) or ("built in; device:" in out) or ("built in; no device" in out), out


def test_gpu_on_without_device_is_a_usage_error(edge_store, tmp_path):
    if has_device():
        pytest.skip("this machine has a CUDA device")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run([fid_bin(), "mount", edge_store, str(mnt), "-o", "gpu=on"], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "gpu=on" in p.stderr and ("no CUDA device" in p.stderr or "no CUDA decoder" in p.stderr), p.stderr
    assert not os.path.ismount(mnt)


@pytest.mark.parametrize("fmt", ["npy", "png"])
def test_emulated_gpu_path_serves_the_cpu_bytes(edge_tree, edge_store, tmp_path, fmt):
    rels = lossless_files(edge_tree)
    assert rels
    with mounted(edge_store, str(tmp_path / "cpu"), "-o", f"gpu=off,raw_format={fmt}") as mnt:
        want = read_all(mnt, rels)
        assert json.load(open(os.path.join(mnt, ".fidelity", "stats")))["gpu"] is None
    opts = f"gpu=emulate,raw_format={fmt},gpu_batch=4,gpu_deadline_us=2000,threads=8"
    with mounted(edge_store, str(tmp_path / "emu"), "-o", opts) as mnt:
        # Concurrent first reads so that batches form.
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as ex:
            got = dict(zip(rels, ex.map(lambda r: open(os.path.join(mnt, r), "rb").read(), rels)))
        for rel in rels:
            assert got[rel] == want[rel], rel
        stats = json.load(open(os.path.join(mnt, ".fidelity", "stats")))
        gpu = stats["gpu"]
        assert gpu["decoder"].startswith("CPU emulation")
        assert gpu["jobs"] == len(rels) and gpu["failed_jobs"] == 0
        assert gpu["max_batch_bytes"] == (1 << 30) // 4 // 2  # gpu_memory 1GiB: a quarter over two streams
        # Everything was allocated at start (an arena of views, two streams' buffers): no view
        # went to heap memory, no buffer grew.
        assert gpu["pageable_views"] == 0 and gpu["buffer_growths"] == 0, gpu
        assert gpu["host_allocations"] == 2 * 2 + 1 and gpu["device_allocations"] == 3 * 2, gpu
        assert 1 <= gpu["peak_in_flight"] <= 2, gpu
        assert 1 <= gpu["batches"] <= len(rels)
        cfg = json.load(open(os.path.join(mnt, ".fidelity", "config")))
        assert cfg["gpu"] == "emulate" and cfg["gpu_batch"] == 4 and cfg["gpu_deadline_us"] == 2000


def test_gpu_on_matches_cpu_with_a_device(edge_tree, edge_store, tmp_path):
    if not has_device():
        pytest.skip("no CUDA device: " + version().strip().splitlines()[-1])
    rels = lossless_files(edge_tree)
    with mounted(edge_store, str(tmp_path / "cpu"), "-o", "gpu=off,raw_format=npy") as mnt:
        want = read_all(mnt, rels)
    with mounted(edge_store, str(tmp_path / "gpu"), "-o", "gpu=on,raw_format=npy,gpu_memory=64MiB") as mnt:
        assert read_all(mnt, rels) == want
        gpu = json.load(open(os.path.join(mnt, ".fidelity", "stats")))["gpu"]
        assert gpu["decoder"].startswith("CUDA")
        assert gpu["max_batch_bytes"] == (64 << 20) // 8  # a quarter of gpu_memory over 2 streams


def test_the_gpu_mount_bench_exits_0_after_a_complete_run_and_leaves_nothing(tmp_path):
    """scripts/bench/gpu_mount.sh, as the device kit runs it, on a few small PNGs (gpu=emulate
    against gpu=off where there is no device): exit 0 once every figure is printed, its work
    folder gone, mounted or not at the end."""
    from PIL import Image

    pngs = tmp_path / "pngs"
    pngs.mkdir()
    for i in range(4):
        Image.frombytes("RGB", (48, 32), bytes((i * 7 + k) % 256 for k in range(48 * 32 * 3))).save(pngs / f"{i}.png")
    work = tmp_path / "tmp"
    work.mkdir()
    env = dict(os.environ, TMPDIR=str(work), ROUNDS="1", GPU_MOUNT_BUDGET_S="60", FIDELITYFS_BIN=fid_bin(),
               READBENCH_BIN=os.path.join(REPO, "build", "scripts", "bench", "readbench"))
    if not has_device():
        env["GPU_MODES"] = "emulate,off"
    p = subprocess.run(["bash", os.path.join(REPO, "scripts", "bench", "gpu_mount.sh"), str(pngs)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "medians over the rounds" in p.stdout and " / gpu=" in p.stdout, p.stdout
    assert os.listdir(work) == []
