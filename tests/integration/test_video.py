"""pack --video-frames over a real mount, on videos the ffmpeg CLI made (tests/fixtures/make_videos.py):
each video a clip folder of img_00001.jpg ... whose frame count is ffprobe's, each frame at full
within 40 dB PSNR of the ffmpeg CLI's decode (compared in luma, where colour conversion cannot
differ), rotation applied, odd sizes, full-range MJPEG, 10-bit and VFR taken; a video cut short keeps what decodes
and says so; an audio-only file is skipped with its reason; fps and short_side as ffmpeg's
filters count and size; without --video-frames videos stay byte-identical blobs."""
import errno
import glob
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from conftest import REPO, _photos, fid_bin
from fidstore import Store
from mountutil import mounted
from mountutil import read_file as read

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the ffmpeg CLI makes the test videos")

DECODABLE = ["h264.mp4", "vp9.webm", "phone.mp4", "odd.mkv", "mjpeg.avi", "deep.mkv", "vfr.mkv", "cut.mp4"]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("videos") / "src")
    photos = _photos()
    photo = sorted(glob.glob(os.path.join(photos, "*.jpg")))[:1] if photos else []
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "make_videos.py"), "--out", out,
                    *(["--photo", photo[0]] if photo else [])], check=True, capture_output=True)
    return out


def pack(src, store, *extra):
    return subprocess.run([fid_bin(), "pack", src, store, "--progress", "off", *extra], capture_output=True, text=True)


@pytest.fixture(scope="module")
def video_store(videos, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("videos") / "store")
    p = pack(videos, store, "--video-frames", "--allow-skipped")
    assert p.returncode == 0, p.stderr
    return store, p.stdout


def ffprobe_frames(path):
    p = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                        "stream=nb_read_frames", "-of", "csv=p=0", path], capture_output=True, text=True, check=True)
    return int(p.stdout.split(",")[0].strip())  # (a rotated stream adds its side data after a comma)


def ffmpeg_luma(path, width, height, *vf):
    """The ffmpeg CLI's decode of every frame (rotation applied, no frame dropped or repeated), as
    full-range luma, one array of frames."""
    p = subprocess.run(["ffmpeg", "-v", "error", "-i", path, *vf, "-vsync", "passthrough", "-f", "rawvideo",
                        "-pix_fmt", "gray", "-"], capture_output=True, check=True)
    return np.frombuffer(p.stdout, np.uint8).reshape(-1, height, width)


def luma(jpeg):
    im = Image.open(io.BytesIO(jpeg))
    im.draft("YCbCr", im.size)  # libjpeg's own samples, before any conversion to RGB
    return np.asarray(im)[..., 0].astype(np.float64)


def psnr(a, b):
    mse = np.mean((a - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def test_every_frame_matches_the_ffmpeg_cli(videos, video_store, mnt):
    store, _ = video_store
    st = Store(store)
    with mounted(store, mnt):
        assert sorted(os.listdir(mnt)) == sorted([v.rsplit(".", 1)[0] for v in DECODABLE] + ["notes.txt"])
        for video in DECODABLE:
            folder = os.path.join(mnt, video.rsplit(".", 1)[0])
            names = sorted(os.listdir(folder))
            n = ffprobe_frames(os.path.join(videos, video))
            assert names == [f"img_{k:05d}.jpg" for k in range(1, n + 1)], (video, len(names), n)
            width, height = Image.open(os.path.join(folder, names[0])).size
            want = ffmpeg_luma(os.path.join(videos, video), width, height)
            assert len(want) == n, video
            worst = min(psnr(luma(read(os.path.join(folder, name))), want[k]) for k, name in enumerate(names))
            assert worst >= 40.0, (video, worst)
            # Every level is a JPEG of the same size.
            for level in (1, 5):
                im = Image.open(io.BytesIO(read(os.path.join(mnt, ".fidelity", "sg", str(level), video.rsplit(".", 1)[0],
                                                             names[-1]))))
                im.load()
                assert im.size == (width, height)
        assert Image.open(os.path.join(mnt, "phone", "img_00001.jpg")).size == (180, 320)  # turned upright
        assert Image.open(os.path.join(mnt, "odd", "img_00001.jpg")).size == (161, 97)
        assert read(os.path.join(mnt, "notes.txt")) == open(os.path.join(videos, "notes.txt"), "rb").read()
        check_video_attributes(videos, st, mnt)
    # Each video's frames are one clip, in frame order.
    by_slot = {(f["record"], f["slot"]): rel for rel, f in st.files.items()}
    runs = {}
    for c in st.clips:
        names = [by_slot[(c["record"], c["first_slot"] + j)] for j in range(c["frames"])]
        runs.setdefault(os.path.dirname(names[0]), []).extend(names)
    assert sorted(runs) == sorted(v.rsplit(".", 1)[0] for v in DECODABLE)
    for folder, names in runs.items():
        assert names == sorted(names), folder


def ffprobe_stream(path):
    p = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                        "stream=codec_name,avg_frame_rate,width,height", "-of", "json", path],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["streams"][0]


def check_video_attributes(videos, st, mnt):
    """Each clip folder tells its video (getfattr, also under /.fidelity/sg/K/), as ffprobe
    does and as the index's videos table holds it; other folders have no such attribute."""
    facts = ["source", "source_size", "codec", "frame_rate", "frame_size", "frames"]
    for video in DECODABLE:
        clip = video.rsplit(".", 1)[0]
        probe = ffprobe_stream(os.path.join(videos, video))
        w, h = probe["width"], probe["height"]
        if video == "phone.mp4":
            w, h = h, w  # displayed upright
        num, den = (int(x) for x in probe["avg_frame_rate"].split("/"))
        g = math.gcd(num, den) if num else 1
        want = {"source": video, "source_size": str(os.path.getsize(os.path.join(videos, video))),
                "codec": probe["codec_name"], "frame_rate": f"{num // g}/{den // g}" if num else "0/1",
                "frame_size": f"{w}x{h}", "frames": str(len(os.listdir(os.path.join(mnt, clip))))}
        for folder in (os.path.join(mnt, clip), os.path.join(mnt, ".fidelity", "sg", "3", clip)):
            got = {k: os.getxattr(folder, "user.fidelity." + k).decode() for k in facts}
            assert got == want, (folder, got, want)
            assert {"user.fidelity." + k for k in facts} <= set(os.listxattr(folder)), folder
        v = st.videos[clip]
        assert (v["name"], str(v["frames"]), f"{v['width']}x{v['height']}") == (video, want["frames"], want["frame_size"])
    with pytest.raises(OSError) as e:
        os.getxattr(mnt, "user.fidelity.frames")
    assert e.value.errno == errno.ENODATA
    with pytest.raises(OSError) as e:
        os.setxattr(os.path.join(mnt, "h264"), "user.fidelity.frames", b"3")
    assert e.value.errno == errno.EPERM


def test_pack_says_what_it_kept_and_skipped(videos, video_store, tmp_path):
    _, out = video_store
    total = sum(ffprobe_frames(os.path.join(videos, v)) for v in DECODABLE)
    assert f"videos: {len(DECODABLE)} (" in out and f"into {total} frames" in out, out
    assert f"clips: {len(DECODABLE)} folders of frames ({total} files)" in out, out
    cut = ffprobe_frames(os.path.join(videos, "cut.mp4"))
    assert f"video cut short: cut: kept {cut} frames: " in out, out
    assert "skipped: sound.mp4: no video stream" in out, out
    # The videos' bytes and their frames' at each level, in pack's summary and in inspect.
    store, _ = video_store
    st = Store(store)
    j = json.loads(subprocess.run([fid_bin(), "inspect", store, "--json"], capture_output=True, text=True,
                                  check=True).stdout)["videos"]
    video_bytes = sum(os.path.getsize(os.path.join(videos, v)) for v in DECODABLE)
    assert (j["videos"], j["bytes"], j["frames"]) == (len(DECODABLE), video_bytes, total), j
    frames = [rel for rel in st.files if os.path.dirname(rel) in st.videos]
    assert len(frames) == total
    for level in (1, 5, st.levels):
        assert j["frame_bytes_by_level"][level - 1] == sum(len(st.read(rel, level)) for rel in frames), level
    ratios = " ".join(f"{k + 1}:{b / video_bytes:.2f}" for k, b in enumerate(j["frame_bytes_by_level"]))
    assert f"video frames by level (bytes stored, over the videos' bytes): {ratios}\n" in out, out
    text = subprocess.run([fid_bin(), "inspect", store], capture_output=True, text=True, check=True).stdout
    assert f"videos          {len(DECODABLE)} ({video_bytes} bytes) into {total} frames" in text, text
    # Shards of a pack each keep their clips' videos; merged, the store has them all.
    for i in (0, 1):
        p = pack(videos, str(tmp_path / f"part{i}"), "--video-frames", "--allow-skipped", "--shard", f"{i}/2")
        assert p.returncode == 0, p.stderr
    parts = [Store(str(tmp_path / f"part{i}")).videos for i in (0, 1)]
    assert parts[0] and parts[1] and not set(parts[0]) & set(parts[1])
    m = subprocess.run([fid_bin(), "merge", str(tmp_path / "part0"), str(tmp_path / "part1"), str(tmp_path / "merged")],
                       capture_output=True, text=True)
    assert m.returncode == 0, m.stderr
    assert Store(str(tmp_path / "merged")).videos == st.videos
    # Without --allow-skipped the audio-only file fails the pack, the store written all the same.
    p = pack(videos, str(tmp_path / "strict"), "--video-frames")
    assert p.returncode == 1 and "1 source entry was skipped" in p.stderr, p.stderr
    assert os.path.exists(tmp_path / "strict" / "index.sqlite")


def test_fps_and_short_side_as_the_ffmpeg_filters(videos, tmp_path, mnt):
    store = str(tmp_path / "store")
    p = pack(videos, store, "--video-frames", "fps=10,short_side=96,quality=90", "--allow-skipped")
    assert p.returncode == 0, p.stderr
    with mounted(store, mnt):
        for video in DECODABLE:
            folder = os.path.join(mnt, video.rsplit(".", 1)[0])
            frames = sorted(os.listdir(folder))
            q = subprocess.run(["ffmpeg", "-v", "error", "-i", os.path.join(videos, video), "-vf", "fps=10", "-f",
                                "framemd5", "-"], capture_output=True, text=True, check=True)
            want = sum(1 for line in q.stdout.splitlines() if line and not line.startswith("#"))
            assert len(frames) == want, (video, len(frames), want)
            size = Image.open(os.path.join(folder, frames[0])).size
            assert min(size) == 96, (video, size)
        assert Image.open(os.path.join(mnt, "phone", "img_00001.jpg")).size == (96, 171)


def test_without_the_option_videos_are_blobs_and_bad_options_are_usage_errors(videos, tmp_path, mnt):
    store = str(tmp_path / "plain")
    p = pack(videos, store)
    assert p.returncode == 0, p.stderr
    with mounted(store, mnt):
        for video in DECODABLE + ["sound.mp4"]:
            assert read(os.path.join(mnt, video)) == open(os.path.join(videos, video), "rb").read(), video
    for bad, why in (("fps=0", "fps takes a positive rate"), ("short_side=4", "short_side takes pixels"),
                     ("quality=101", "quality takes 1 to 100"), ("speed=2", "expected fps=N")):
        p = pack(videos, str(tmp_path / "bad"), f"--video-frames={bad}")
        assert p.returncode == 2 and why in p.stderr, (bad, p.stderr)
        assert not os.path.exists(tmp_path / "bad")
    # A path right after the option is taken as its options: the message says so.
    p = subprocess.run([fid_bin(), "pack", "--video-frames", videos, str(tmp_path / "bad")], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "write the paths first" in p.stderr, p.stderr


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True)


@pytest.fixture(scope="module")
def odd_videos(tmp_path_factory):
    """Videos a new user meets: an mkv cut short, two frames a day apart, two videos of one stem,
    a video of two frames (too short for a clip)."""
    out = tmp_path_factory.mktemp("odd")
    x264 = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p"]
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=25", "-frames:v", "10", *x264, str(out / "whole.mkv"))
    data = (out / "whole.mkv").read_bytes()
    (out / "cut").mkdir()
    (out / "cut" / "ten.mkv").write_bytes(data[:len(data) * 6 // 10])
    (out / "gap").mkdir()  # the second frame at t = 1e8 s
    ffmpeg("-f", "lavfi", "-i", "color=c=red:size=32x32:rate=1", "-frames:v", "2", "-vf", "setpts=N*100000000/TB",
           "-fps_mode", "passthrough", *x264, str(out / "gap" / "gap.mkv"))
    (out / "stem").mkdir()
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-frames:v", "6", *x264, str(out / "stem" / "clip.mkv"))
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-frames:v", "5", *x264, str(out / "stem" / "clip.mp4"))
    (out / "two").mkdir()
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x48:rate=25", "-frames:v", "2", *x264, str(out / "two" / "short.mp4"))
    return out


def test_a_truncated_container_is_said_cut_short(odd_videos, tmp_path):
    src = str(odd_videos / "cut")
    kept = ffprobe_frames(os.path.join(src, "ten.mkv"))
    assert 0 < kept < 10
    p = pack(src, str(tmp_path / "store"), "--video-frames")
    assert p.returncode == 0, p.stderr
    assert f"video cut short: ten: kept {kept} frames: its container ends early (File ended prematurely)" in p.stdout, \
        p.stdout
    # The whole video is not.
    whole = tmp_path / "whole"
    whole.mkdir()
    shutil.copy(odd_videos / "whole.mkv", whole)
    p = pack(str(whole), str(tmp_path / "store2"), "--video-frames")
    assert p.returncode == 0 and "cut short" not in p.stdout, p.stdout


def test_repeated_frames_stop_at_the_cap_and_on_sigterm(odd_videos, tmp_path):
    src = str(odd_videos / "gap")
    # fps=1 over a second frame at 1e8 s would repeat it 1e8 times: the default cap (4 hours at
    # 1 fps) skips the video with its reason, at once.
    p = subprocess.run([fid_bin(), "pack", src, str(tmp_path / "capped"), "--progress", "off", "--video-frames=fps=1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "skipped: gap.mkv: it gives more than 14400 frames (4 hours at the output frame rate)" in p.stdout, p.stdout
    p = pack(src, str(tmp_path / "lower"), "--video-frames=fps=1,max_frames=50", "--allow-skipped")
    assert p.returncode == 0 and "skipped: gap.mkv: it gives more than 50 frames: " in p.stdout, p.stdout
    # With a cap that high the repeats run on; SIGTERM stops the pack within 2 s, leaving nothing.
    store = tmp_path / "stopped"
    proc = subprocess.Popen([fid_bin(), "pack", src, str(store), "--progress", "off",
                             "--video-frames=fps=1,max_frames=1000000000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and scratch_bytes(proc.pid) < (1 << 20):  # the frames repeat now
            assert proc.poll() is None, proc.communicate()
        assert scratch_bytes(proc.pid) >= (1 << 20)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 2.0
        assert proc.returncode != 0 and "interrupted" in err, err
    finally:
        proc.kill()
        proc.wait()
    assert not store.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".stopped.tmp-")]


def scratch_bytes(pid):
    """The bytes of the unlinked scratch files (the frames decoded so far) that `pid` holds open."""
    total = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if "video-frames." in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
            except OSError:
                pass
    except OSError:
        pass
    return total


def test_videos_of_one_stem_keep_the_first_and_skip_the_others(odd_videos, tmp_path, mnt):
    store = str(tmp_path / "store")
    p = pack(str(odd_videos / "stem"), store, "--video-frames")
    assert p.returncode == 1, p.stderr
    assert "skipped: clip.mp4: its frames' folder 'clip' is taken by the frames of clip.mkv" in p.stdout, p.stdout
    with mounted(store, mnt):
        assert sorted(os.listdir(mnt)) == ["clip"]
        assert len(os.listdir(os.path.join(mnt, "clip"))) == 6  # clip.mkv's frames
        assert os.getxattr(os.path.join(mnt, "clip"), "user.fidelity.source") == b"clip.mkv"


def test_an_append_adds_no_file_to_a_video_folder_nor_a_video_over_a_folder(odd_videos, tmp_path):
    store = str(tmp_path / "store")
    p = pack(str(odd_videos / "two"), store, "--video-frames")
    assert p.returncode == 0, p.stderr
    with open(os.path.join(store, "index.sqlite"), "rb") as f:
        before = f.read()
    extra = tmp_path / "extra"
    (extra / "short").mkdir(parents=True)
    Image.new("RGB", (64, 48)).save(extra / "short" / "extra.jpg")
    p = subprocess.run([fid_bin(), "pack", "--append", str(extra), store, "--progress", "off"], capture_output=True,
                       text=True)
    assert p.returncode == 1, p.stderr
    assert "the source adds files to a folder the store made from a video (short/extra.jpg)" in p.stderr, p.stderr
    with open(os.path.join(store, "index.sqlite"), "rb") as f:
        assert f.read() == before
    # A video whose frames' folder the store has as a plain folder.
    (extra / "short" / "extra.jpg").unlink()
    (extra / "short").rmdir()
    (extra / "plain").mkdir()
    Image.new("RGB", (64, 48)).save(extra / "plain" / "a.jpg")
    assert subprocess.run([fid_bin(), "pack", "--append", str(extra), store, "--progress", "off"],
                          capture_output=True).returncode == 0
    with open(os.path.join(store, "index.sqlite"), "rb") as f:
        before = f.read()
    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(odd_videos / "stem" / "clip.mp4", videos / "plain.mp4")
    p = subprocess.run([fid_bin(), "pack", "--append", str(videos), store, "--progress", "off", "--video-frames"],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert "the store has a folder 'plain' already, where the source's video 'plain.mp4' would put its frames" in \
        p.stderr, p.stderr
    with open(os.path.join(store, "index.sqlite"), "rb") as f:
        assert f.read() == before
    assert subprocess.run([fid_bin(), "verify", store], capture_output=True).returncode == 0
