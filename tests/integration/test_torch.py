"""torchvision over the mount: ImageFolder sees the same classes and samples as over the source,
and a DataLoader epoch with 2 workers runs at levels 1, 5 and full."""
import os

import pytest

from mountutil import mounted

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("torchvision.datasets")
transforms = pytest.importorskip("torchvision.transforms")

XA = "user.fidelity.scan_group"


def test_imagefolder_and_dataloader(imagenet_tree, imagenet_store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(imagenet_store, mnt):
        src = datasets.ImageFolder(imagenet_tree)
        ds = datasets.ImageFolder(mnt)
        assert ds.classes == src.classes
        assert ds.class_to_idx == src.class_to_idx
        rel = lambda root, samples: [(os.path.relpath(p, root), c) for p, c in samples]
        assert rel(mnt, ds.samples) == rel(imagenet_tree, src.samples)
        tf = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
        for level in (b"1", b"5", b"full"):
            os.setxattr(mnt, XA, level)  # the whole tree, from the next open on
            ds = datasets.ImageFolder(mnt, transform=tf)
            loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
            seen = 0
            labels = torch.zeros(len(ds.classes), dtype=torch.long)
            for x, y in loader:
                assert x.shape[1:] == (3, 64, 64)
                assert torch.isfinite(x).all()
                seen += x.shape[0]
                labels += torch.bincount(y, minlength=len(ds.classes))
            assert seen == len(src.samples)
            assert labels.tolist() == [sum(1 for _, c in src.samples if c == k) for k in range(len(src.classes))]
