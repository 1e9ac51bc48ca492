"""fidelityfs quality: its metrics against scikit-image (PSNR, SSIM) and an MS-SSIM written here
from Wang, Simoncelli and Bovik (2003) over scipy's Gaussian filter, on the same pixels; its
sample, recommendation, JSON shape, per-class rules and usage errors.

The pixels: each sampled file is read at every level with fidstore (an independent reader of the
store) and decoded with Pillow, which uses the system libjpeg-turbo with its defaults (ISLOW
IDCT, fancy upsampling), as fidelityfs does; test_pillow_decodes_like_djpeg checks that against
djpeg, the library's own tool, pixel for pixel."""
import io
import json
import os
import re
import subprocess

import numpy as np
import pytest
from PIL import Image
from scipy.ndimage import gaussian_filter
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

from conftest import run
from fidstore import Store

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2


def luma(jpeg_bytes):
    im = Image.open(io.BytesIO(jpeg_bytes))
    im.load()
    a = np.asarray(im)
    if im.mode == "L":
        return a.astype(np.float64)
    assert im.mode == "RGB", im.mode
    a = a.astype(np.float64)
    return 0.299 * a[..., 0] + 0.587 * a[..., 1] + 0.114 * a[..., 2]


def ssim_and_cs(x, y):
    """Mean SSIM and mean contrast-structure term, the way skimage computes SSIM."""
    f = lambda im: gaussian_filter(im, sigma=1.5, mode="reflect", truncate=3.5)  # noqa: E731
    ux, uy = f(x), f(y)
    vx, vy, vxy = f(x * x) - ux * ux, f(y * y) - uy * uy, f(x * y) - ux * uy
    cs = (2 * vxy + C2) / (vx + vy + C2)
    s = (2 * ux * uy + C1) * (2 * vxy + C2) / ((ux ** 2 + uy ** 2 + C1) * (vx + vy + C2))
    return s[5:-5, 5:-5].mean(), cs[5:-5, 5:-5].mean()


def msssim(x, y):
    scales = 1
    while scales < 5 and min(x.shape[0] >> scales, x.shape[1] >> scales) >= 11:
        scales += 1
    w = np.array(WEIGHTS[:scales]) / sum(WEIGHTS[:scales])
    value = 1.0
    for i in range(scales):
        if i:
            h2, w2 = x.shape[0] // 2, x.shape[1] // 2
            x, y = [(a[0:2 * h2:2, 0:2 * w2:2] + a[0:2 * h2:2, 1:2 * w2:2] + a[1:2 * h2:2, 0:2 * w2:2] +
                     a[1:2 * h2:2, 1:2 * w2:2]) / 4 for a in (x, y)]
        s, cs = ssim_and_cs(x, y)
        value *= max(s if i == scales - 1 else cs, 0.0) ** w[i]
    return value


def quality(store, *args, check=True):
    return run("quality", store, "--progress", "off", *args, check=check)


@pytest.fixture(scope="module")
def sampled(imagenet_store):
    p = quality(imagenet_store, "--json", "--per-file", "--sample", "20", "--seed", "3")
    return json.loads(p.stdout)


def test_json_shape_and_sample(sampled, imagenet_store):
    j = sampled
    for key in ("store", "sample", "seed", "target", "levels", "recommended", "files", "jpeg_files"):
        assert key in j, key
    assert j["sample"] == 20 and len(j["files"]) == 20 and len(set(j["files"])) == 20
    assert j["seed"] == 3 and j["target"] == {"msssim": 0.95, "statistic": "mean"}
    assert "by_class" not in j
    store = Store(imagenet_store)
    assert j["jpeg_files"] == sum(1 for f in store.files.values() if f["kind"] == "jpeg")
    assert len(j["levels"]) == store.levels
    for k, lv in enumerate(j["levels"], 1):
        assert lv["level"] == k
        assert set(lv) >= {"bytes_fraction", "psnr", "ssim", "msssim"}
        assert set(lv["msssim"]) == {"mean", "p5"}
        assert lv["msssim"]["p5"] <= lv["msssim"]["mean"] <= 1.0
    full = j["levels"][-1]
    assert full["psnr"] is None and full["ssim"] == 1.0 and full["msssim"] == {"mean": 1.0, "p5": 1.0}
    assert full["bytes_fraction"] == 1.0
    fractions = [lv["bytes_fraction"] for lv in j["levels"]]
    assert fractions == sorted(fractions) and 0 < fractions[0] < 1
    # Bytes: what fidstore reads at each level, summed over the sample.
    sizes = [[len(b) for b in store.all_levels(rel)] for rel in j["files"]]
    for k in range(store.levels):
        assert fractions[k] == pytest.approx(sum(s[k] for s in sizes) / sum(s[-1] for s in sizes), abs=1e-12)
    # Same seed, same sample; another seed, another one.
    again = json.loads(quality(imagenet_store, "--json", "--sample", "20", "--seed", "3").stdout)
    assert again["files"] == j["files"]
    other = json.loads(quality(imagenet_store, "--json", "--sample", "20", "--seed", "4").stdout)
    assert other["files"] != j["files"]


def test_recommended_is_the_lowest_level_meeting_the_target(sampled, imagenet_store):
    means = [lv["msssim"]["mean"] for lv in sampled["levels"]]
    k = sampled["recommended"]
    assert means[k - 1] >= 0.95 and (k == 1 or means[k - 2] < 0.95)
    strict = json.loads(quality(imagenet_store, "--json", "--sample", "20", "--seed", "3",
                                "--target", "msssim=0.999").stdout)
    k2 = strict["recommended"]
    assert k2 >= k and means[k2 - 1] >= 0.999 and (k2 == 1 or means[k2 - 2] < 0.999)


def test_metrics_match_scikit_image(sampled, imagenet_store):
    store = Store(imagenet_store)
    levels = store.levels
    ref = {"mse": [[] for _ in range(levels)], "ssim": [[] for _ in range(levels)],
           "msssim": [[] for _ in range(levels)]}
    for rel in sampled["files"]:
        ours = sampled["per_file"][rel]
        planes = [luma(b) for b in store.all_levels(rel)]
        full = planes[-1]
        for k in range(levels):
            y = planes[k]
            psnr = peak_signal_noise_ratio(full, y, data_range=255) if not np.array_equal(full, y) else None
            ssim = structural_similarity(full, y, data_range=255, gaussian_weights=True, sigma=1.5,
                                         use_sample_covariance=False)
            ms = msssim(full, y)
            # Per file and level: the same pixels, the same maths, so only rounding differs.
            if psnr is None:
                assert ours["psnr"][k] is None, (rel, k)
            else:
                assert ours["psnr"][k] == pytest.approx(psnr, abs=1e-6), (rel, k)
            ref["mse"][k].append(mean_squared_error(full, y))
            assert ours["ssim"][k] == pytest.approx(ssim, abs=1e-6), (rel, k)
            assert ours["msssim"][k] == pytest.approx(ms, abs=1e-6), (rel, k)
            ref["ssim"][k].append(ssim)
            ref["msssim"][k].append(ms)
    for k, lv in enumerate(sampled["levels"]):
        # A level's PSNR is that of the sample's mean MSE (an image equal to full adds 0).
        mse = np.mean(ref["mse"][k])
        if mse > 0:
            assert lv["psnr"] == pytest.approx(10 * np.log10(255 ** 2 / mse), abs=1e-3)
        else:
            assert lv["psnr"] is None
        assert lv["identical"] == sum(1 for m in ref["mse"][k] if m == 0)
        assert lv["ssim"] == pytest.approx(np.mean(ref["ssim"][k]), abs=1e-3)
        assert lv["msssim"]["mean"] == pytest.approx(np.mean(ref["msssim"][k]), abs=1e-3)
        assert lv["msssim"]["p5"] == pytest.approx(np.percentile(ref["msssim"][k], 5), abs=1e-3)
    # The reference's SSIM is skimage's: the MS-SSIM helper agrees with it at scale 1.
    rel = sampled["files"][0]
    planes = [luma(b) for b in store.all_levels(rel)]
    s, _ = ssim_and_cs(planes[-1], planes[0])
    assert s == pytest.approx(structural_similarity(planes[-1], planes[0], data_range=255, gaussian_weights=True,
                                                    sigma=1.5, use_sample_covariance=False), abs=1e-12)


def test_pillow_decodes_like_djpeg(sampled, imagenet_store, tmp_path):
    """Pillow's pixels are libjpeg-turbo's default decode (what fidelityfs decodes with)."""
    store = Store(imagenet_store)
    for rel in sampled["files"][:4]:
        for k, data in enumerate(store.all_levels(rel), 1):
            if k not in (1, 3, store.levels):
                continue
            src = tmp_path / "in.jpg"
            src.write_bytes(data)
            ppm = subprocess.run(["djpeg", "-dct", "int", "-pnm", str(src)], capture_output=True, check=True).stdout
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(ppm))), np.asarray(Image.open(io.BytesIO(data))))


def test_by_class_and_rules(imagenet_store, imagenet_tree, tmp_path):
    p = quality(imagenet_store, "--json", "--by-class", "--sample", "60")
    j = json.loads(p.stdout)
    classes = sorted({rel.split("/")[0] for rel in j["files"]})
    assert sorted(j["by_class"]) == classes
    assert sum(c["sample"] for c in j["by_class"].values()) == j["sample"]
    for c in j["by_class"].values():
        means = [lv["msssim"]["mean"] for lv in c["levels"]]
        k = c["recommended"]
        assert means[k - 1] >= 0.95 and (k == 1 or means[k - 2] < 0.95)
    import yaml
    rules = yaml.safe_load(j["rules_yaml"])["rules"]
    levels = len(j["levels"])
    assert [r["path"] for r in rules] == [f"{c}/**" for c in classes]
    for r, c in zip(rules, classes):
        k = j["by_class"][c]["recommended"]
        assert r["scan_group"] == ("full" if k == levels else k)
    # Text output carries the same block, ready for a config file.
    text = quality(imagenet_store, "--by-class", "--sample", "60").stdout
    assert j["rules_yaml"] in text
    assert re.search(r"recommended level: \d+", text)


def test_recommending_on_the_5th_percentile(imagenet_store):
    """msssim_p5=X asks 19 of 20 files to reach X, never a lower level than the mean asks; the text
    states the statistic and both values at the level, and a mean target cautions when its 5th
    percentile falls short."""
    mean = json.loads(quality(imagenet_store, "--sample", "60", "--json", "--target", "msssim=0.95").stdout)
    p5 = json.loads(quality(imagenet_store, "--sample", "60", "--json", "--target", "msssim_p5=0.95").stdout)
    assert mean["target"] == {"msssim": 0.95, "statistic": "mean"}
    assert p5["target"] == {"msssim": 0.95, "statistic": "p5"}
    k = p5["recommended"]
    assert k >= mean["recommended"]
    assert k == len(p5["levels"]) or p5["levels"][k - 1]["msssim"]["p5"] >= 0.95
    assert all(l["msssim"]["p5"] < 0.95 for l in p5["levels"][:k - 1])
    text = quality(imagenet_store, "--sample", "60").stdout
    at = mean["levels"][mean["recommended"] - 1]
    assert (f"recommended level: {mean['recommended']} (the lowest level whose mean MS-SSIM >= 0.95; there, "
            f"mean {at['msssim']['mean']:.4f}, 5th percentile {at['msssim']['p5']:.4f})") in text, text
    assert ("caution: at level" in text) == (at["msssim"]["p5"] < 0.95), text


def test_text_table(imagenet_store):
    out = quality(imagenet_store, "--sample", "5").stdout
    lines = [l for l in out.splitlines() if re.match(r"\s*\d+\s+\d\.\d{3}\s", l)]
    assert len(lines) == 10
    assert lines[-1].split()[2] == "inf"


@pytest.mark.parametrize("target", ["psnr=3", "msssim=0", "msssim=1.5", "msssim=", "msssim=x", "0.9"])
def test_bad_target_is_a_usage_error(imagenet_store, target):
    p = quality(imagenet_store, "--target", target, check=False)
    assert p.returncode == 2, p.stderr
    assert "msssim" in p.stderr


def test_usage_and_runtime_errors(tmp_path, imagenet_store):
    p = quality(imagenet_store, "--sample", "0", check=False)
    assert p.returncode == 2
    assert p.stderr.startswith("fidelityfs quality: --sample: must be more than 0 files, got 0\n"), p.stderr
    p = quality(imagenet_store, "--per-file", check=False)
    assert p.returncode == 2
    assert p.stderr.startswith("fidelityfs quality: --per-file requires --json\n"), p.stderr
    p = quality(str(tmp_path / "nowhere"), check=False)
    assert p.returncode == 1 and p.stderr.strip()


def test_edge_cases_store(edge_store):
    """Gray, CMYK, odd sizes, restart markers...: every JPEG is measured, full is exact."""
    p = quality(edge_store, "--json", "--per-file", "--sample", "100000")
    j = json.loads(p.stdout)
    assert j["failed"] == 0 and j["sample"] == j["jpeg_files"] > 0
    for rel, f in j["per_file"].items():
        assert f["msssim"][-1] == 1.0 and f["ssim"][-1] == 1.0 and f["psnr"][-1] is None, rel
        assert all(0.0 <= v <= 1.0 for v in f["msssim"]), rel


def test_plot(imagenet_store, tmp_path):
    out = tmp_path / "q.png"
    quality(imagenet_store, "--sample", "10", "--plot", str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    env = dict(os.environ, FIDELITYFS_SCRIPTS=str(tmp_path / "none"))
    p = run("quality", imagenet_store, "--sample", "10", "--plot", str(out), check=False, env=env)
    assert p.returncode == 1 and "plot_quality.py" in p.stderr
