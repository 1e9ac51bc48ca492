"""scripts/tour.sh, the README's first hour on sample data, runs to its end and shows each step."""
import os
import subprocess

from conftest import REPO, fid_bin


def test_the_tour_runs_every_step(tmp_path):
    p = subprocess.run(["bash", os.path.join(REPO, "scripts", "tour.sh")], capture_output=True, text=True,
                       env={**os.environ, "FIDELITYFS_BIN": fid_bin(), "TOUR_DIR": str(tmp_path)}, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    for step in ("$ fidelityfs pack ", "$ fidelityfs inspect ", "$ fidelityfs verify ", "$ fidelityfs mount ",
                 "$ getfattr -d -m user.fidelity ", "$ setfattr -n user.fidelity.scan_group -v full ",
                 "$ fidelityfs stats ", "$ fidelityfs quality ", "$ fusermount3 -u "):
        assert step in out, step
    assert "60 images in 3 classes read through the mount" in out
    assert "recommended level: " in out and "0 EIO in 0 files" in out
    assert out.rstrip().endswith("tour: done")
    assert not os.path.ismount(tmp_path / "mnt")
