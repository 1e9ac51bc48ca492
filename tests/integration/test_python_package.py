"""The Python package in python/ (issue #14): it installs with pip from Debian's setuptools alone
and imports from the install; the stats reader, the level helpers against the xattrs and the
sizes a mount serves, the gradient autotuner (thresholds, schedule, and that tuning leaves the
model, its gradients, the optimizer and the RNGs as they were), and the example training script."""
import copy
import os
import random
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from mountutil import mounted, wait_invalidations

import fidelityfs
from fidelityfs.levels import (SCAN_GROUP, clear_encoding, clear_level, get_encoding, get_level, kind, level_count,
                               set_encoding, set_level, sizes)
from fidelityfs.stats import find_mount_root, read_config, read_stats

PY = sys.executable


def test_pip_install_into_a_target_folder(tmp_path):
    """The install command of python/README.md, offline (--no-index), into a folder; the package
    then imports from there, in a fresh interpreter, with python/ nowhere on the path."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "python"), src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    p = subprocess.run([PY, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "fidelityfs" / "autotune.py").is_file()
    assert list(target.glob("fidelityfs-*.dist-info"))
    code = ("import fidelityfs, fidelityfs.stats, fidelityfs.levels; "
            "from fidelityfs.levels import *; from fidelityfs import *; "
            "from fidelityfs import FidelityOrderSampler, FidelityAutotuner, set_level, read_stats; "
            "print(fidelityfs.__file__, fidelityfs.__version__, FidelityAutotuner.__module__)")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": str(target)}, timeout=120)
    assert p.returncode == 0, p.stderr
    path, version, module = p.stdout.split()
    assert path == str(target / "fidelityfs" / "__init__.py")
    assert version == fidelityfs.__version__ and module == "fidelityfs.autotune"



def test_star_import_of_levels():
    """`from fidelityfs.levels import *` in a fresh interpreter, from python/ (no mount): every name
    in __all__ exists (a name missing there made the star import raise AttributeError)."""
    code = ("from fidelityfs.levels import *; import fidelityfs.levels as m; "
            "missing = [n for n in m.__all__ if n not in globals()]; print(len(m.__all__), missing)")
    p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": os.path.join(REPO, "python")}, timeout=120)
    assert p.returncode == 0, p.stderr
    count, missing = p.stdout.split(" ", 1)
    assert int(count) > 0 and missing.strip() == "[]", p.stdout

def test_stats_and_config_reader(imagenet_store, mnt):
    with mounted(imagenet_store, mnt):
        cls = sorted(os.listdir(mnt))[0]
        f = os.path.join(mnt, cls, sorted(os.listdir(os.path.join(mnt, cls)))[0])
        assert find_mount_root(mnt) == mnt
        assert find_mount_root(f) == mnt
        assert find_mount_root(os.path.join(mnt, ".fidelity", "sg", "3", cls)) == mnt
        with pytest.raises(FileNotFoundError):
            find_mount_root(os.path.dirname(mnt))
        before = read_stats(os.path.join(mnt, cls))  # any path inside the mount
        assert before["levels"] == 10 and before["files"] == 300
        with open(os.path.join(mnt, ".fidelity", "sg", "3", cls, os.path.basename(f)), "rb") as fh:
            n = len(fh.read())
        after = read_stats(mnt)
        assert after["jpeg_reads_by_level"][2] > before["jpeg_reads_by_level"][2]
        assert after["bytes_served"] - before["bytes_served"] >= n  # the file, and the stats files read
        cfg = read_config(f)
        assert cfg["levels"] == 10 and cfg["scan_group"] == "full"
        assert level_count(f) == level_count(mnt) == 10


def test_levels_round_trip(imagenet_store, mnt):
    with mounted(imagenet_store, mnt, "-o", "scan_group=7"):
        cls = sorted(os.listdir(mnt))[1]
        folder = os.path.join(mnt, cls)
        f = os.path.join(folder, sorted(os.listdir(folder))[0])
        other = os.path.join(mnt, sorted(os.listdir(mnt))[0], sorted(os.listdir(os.path.join(mnt, sorted(os.listdir(mnt))[0])))[0])
        per_level = sizes(f)
        assert kind(f) == "jpeg" and len(per_level) == 10 and per_level == sorted(per_level)
        assert len(set(per_level)) > 5

        def state(p):
            return get_level(p), os.getxattr(p, SCAN_GROUP), os.stat(p).st_size

        assert state(f) == (7, b"7", per_level[6])  # the mount default
        assert get_level(folder) == get_level(mnt) == 7
        assert clear_level(f) is False and clear_level(folder) is False  # nothing to remove
        set_level(folder, 3)
        # Every change's names may be dropped just after its reply (docs/MOUNT.md): wait for all.
        assert wait_invalidations(mnt)
        assert state(f) == (3, b"3", per_level[2]) and get_level(folder) == 3
        assert state(other)[0] == 7
        set_level(f, "full")
        assert wait_invalidations(mnt)
        assert state(f) == (10, b"10", per_level[9])
        set_level(f, "2")
        assert wait_invalidations(mnt)
        assert state(f) == (2, b"2", per_level[1])
        with open(f, "rb") as fh:
            assert len(fh.read()) == per_level[1]
        assert clear_level(f) is True
        assert wait_invalidations(mnt)
        assert state(f) == (3, b"3", per_level[2])
        set_level(mnt, 1)  # the root covers everything without its own override
        # A change on the root drops looked-up entries just after its reply (docs/MOUNT.md)
        assert wait_invalidations(mnt)
        assert state(other) == (1, b"1", sizes(other)[0]) and state(f)[0] == 3
        assert clear_level(folder) is True and clear_level(mnt) is True
        assert wait_invalidations(mnt)
        assert state(f) == (7, b"7", per_level[6])
        for bad in (0, -1, "0", "x", "", 2.0, True, None):
            with pytest.raises(ValueError):
                set_level(f, bad)
        with pytest.raises(OSError):  # above L: the mount says EINVAL
            set_level(f, 11)
        with pytest.raises(OSError):  # the views are read-only
            set_level(os.path.join(mnt, ".fidelity", "sg", "4", cls), 2)
        assert get_level(os.path.join(mnt, ".fidelity", "sg", "4", os.path.relpath(f, mnt))) == 4
        assert state(f) == (7, b"7", per_level[6])
        # The encoding, the same way: a folder's setting covers the file until the file's own.
        assert get_encoding(f) == get_encoding(folder) == "progressive" and clear_encoding(f) is False
        set_encoding(folder, "sequential")
        assert wait_invalidations(mnt)
        with open(f, "rb") as fh:
            data = fh.read()
        assert get_encoding(f) == "sequential" and data[:2] == b"\xff\xd8" and os.stat(f).st_size == len(data)
        set_encoding(f, "progressive")
        assert wait_invalidations(mnt)
        assert get_encoding(f) == "progressive" and os.stat(f).st_size == per_level[6]
        assert clear_encoding(f) is True and clear_encoding(folder) is True and get_encoding(f) == "progressive"
        with pytest.raises(ValueError):
            set_encoding(f, "baseline")


# ---- the autotuner --------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torchvision.datasets")
transforms = pytest.importorskip("torchvision.transforms")


def tiny_net(classes):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.3), nn.Linear(16, classes))


def transform():
    return transforms.Compose([transforms.RandomResizedCrop(32, scale=(0.3, 1.0)), transforms.RandomHorizontalFlip(),
                               transforms.ToTensor()])


def snapshot(model, opt):
    """Everything a tuning must leave as it was."""
    import numpy as np
    return {
        "modes": [m.training for m in model.modules()],
        "params": [p.detach().clone() for p in model.parameters()],
        "grad_ids": [id(p.grad) for p in model.parameters()],
        "grads": [p.grad.clone() for p in model.parameters()],
        "buffers": [b.clone() for b in model.buffers()],
        "opt": copy.deepcopy(opt.state_dict()),
        "torch_rng": torch.random.get_rng_state(),
        "py_rng": random.getstate(),
        "np_rng": np.random.get_state()[1].copy(),
    }


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape"):  # numpy
        return (a == b).all()
    return a == b


def test_autotuner_thresholds_schedule_and_no_side_effects(imagenet_store, mnt):
    from fidelityfs.autotune import FidelityAutotuner
    F = torch.nn.functional
    with mounted(imagenet_store, mnt):
        ds = datasets.ImageFolder(mnt, transform=transform())
        torch.manual_seed(1)
        model = tiny_net(len(ds.classes))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = next(iter(torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)))
        F.cross_entropy(model(x), y).backward()
        opt.step()  # momentum buffers exist, and the grads stay populated
        model.eval()
        model[1].train()  # mixed modes must come back as they were
        f = ds.samples[0][0]
        per_level = sizes(f)

        before = snapshot(model, opt)
        tuner = FidelityAutotuner(model, F.cross_entropy, ds, threshold=1.0, warmup=0, every=1, batches=2, batch_size=8)
        reads = read_stats(mnt)["jpeg_reads_by_level"]
        assert tuner.step(0) == 10
        assert same(snapshot(model, opt), before)
        entry = tuner.history[-1]
        assert entry["level"] == 10 and entry["epoch"] == 0 and entry["images"] == 16
        sims = entry["similarities"]
        assert sorted(sims) == list(range(1, 10))
        assert all(-1.0 <= s < 1.0 for s in sims.values()), sims
        assert sims[9] > sims[1]  # more scans, closer to full fidelity
        # the sample was read at every level, 16 files each, from the sg/K views
        got = [a - b for a, b in zip(read_stats(mnt)["jpeg_reads_by_level"], reads)]
        assert all(n >= 16 for n in got), got
        assert get_level(mnt) == 10 and get_level(f) == 10 and os.stat(f).st_size == per_level[9]

        tuner.threshold = -1.0
        assert tuner.tune(epoch=7) == 1
        assert list(tuner.history[-1]["similarities"]) == [1]  # lowest first: level 1 already passes
        assert get_level(mnt) == 1 and get_level(f) == 1 and os.stat(f).st_size == per_level[0]
        assert same(snapshot(model, opt), before)

        # the training that follows is the one without tuning: same step, same result
        twin = copy.deepcopy(model)
        for a, b in zip(model.parameters(), twin.parameters()):
            b.grad = a.grad.clone()  # Parameter's deepcopy leaves .grad out
        twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
        twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
        rng = torch.random.get_rng_state()
        tuner.tune()
        model.train()
        F.cross_entropy(model(x), y).backward()  # dropout draws from the restored RNG
        opt.step()
        torch.random.set_rng_state(rng)
        twin.train()
        F.cross_entropy(twin(x), y).backward()
        twin_opt.step()
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))

        # the schedule: warmup, then every `every` epochs; other epochs change nothing
        tuner.warmup, tuner.every = 2, 3
        assert [e for e in range(12) if tuner.is_tuning_epoch(e)] == [2, 5, 8, 11]
        n = len(tuner.history)
        set_level(mnt, 4)
        assert tuner.step(3) == 4 and len(tuner.history) == n
        clear_level(mnt)

        # from a folder path, setting the level of one class folder only
        cls = os.path.join(mnt, ds.classes[2])
        t2 = FidelityAutotuner(model, F.cross_entropy, mnt, transform=transform(), target=cls, threshold=-1,
                               batches=1, batch_size=4, candidates=[2, 5])
        assert t2.tune() == 2
        assert get_level(cls) == 2 and get_level(mnt) == 10
        assert get_level(os.path.join(cls, os.listdir(cls)[0])) == 2 and get_level(f) == 10
        with pytest.raises(ValueError):
            FidelityAutotuner(model, F.cross_entropy, ds, target=os.path.join(mnt, ".fidelity", "sg", "3"))


def test_example_training_script(imagenet_store, mnt):
    """scripts/examples/train_autotune.py: two tiny epochs on the CPU, tuned at the second."""
    script = os.path.join(REPO, "scripts", "examples", "train_autotune.py")
    with mounted(imagenet_store, mnt):
        p = subprocess.run([PY, script, mnt, "--epochs", "2", "--warmup", "1", "--every", "1", "--image-size", "32",
                            "--batch-size", "16", "--max-images", "64", "--tune-batches", "1", "--threshold", "-1",
                            "--workers", "1"],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
        assert p.returncode == 0, p.stdout + p.stderr
        lines = [line for line in p.stdout.splitlines() if line.startswith("epoch ")]
        assert len(lines) == 2, p.stdout
        assert lines[0].startswith("epoch 0: level 10, 64 images,")
        assert lines[1].startswith("epoch 1: level 1, 64 images,") and "tuning" in lines[1]
        assert "images/s" in lines[1] and "loss" in lines[1]
        assert "level 1 of 10" in p.stderr  # the autotuner's log line
        assert get_level(mnt) == 1


def test_the_documented_levels_snippet_runs(imagenet_store, mnt):
    """docs/MOUNT.md's Python snippet, run as written on a real mount (MNT and FILE filled in):
    `import fidelityfs.levels as L` is the module, with the names the docs give."""
    import re
    with open(os.path.join(REPO, "docs", "MOUNT.md")) as f:
        snippets = [s for s in re.findall(r"```python\n(.*?)```", f.read(), re.S) if "fidelityfs.levels" in s]
    assert len(snippets) == 1
    with mounted(imagenet_store, mnt):
        cls = sorted(d for d in os.listdir(mnt) if not d.startswith("."))[0]
        code = snippets[0].replace('"MNT/train"', repr(os.path.join(mnt, cls))).replace('"MNT"', repr(mnt))
        first = os.path.join(mnt, cls, sorted(os.listdir(os.path.join(mnt, cls)))[0])
        p = subprocess.run([PY, "-c", f"FILE = {first!r}\n" + code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.path.join(REPO, "python")}, timeout=60)
        assert p.returncode == 0, p.stderr
        count, per_level = p.stdout.split(" ", 1)
        assert int(count) == 10 and len(per_level.strip().strip("[]").split(",")) == 10
        wait_invalidations(mnt)
        assert get_level(os.path.join(mnt, cls)) == 10  # cleared: the mount's default, full
