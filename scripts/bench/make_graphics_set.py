#!/usr/bin/env python3
"""Build the graphics-like evaluation set for L3 (issue #15): real non-photographic images that
Debian packages ship, next to the FHD photo set of make_imagefolder.py --kind fhd-png.

  scripts/bench/make_graphics_set.py --out DIR [--cache DIR]

Classes (ImageFolder layout, DIR/CLASS/NAME.png):
  wallpaper   flat art and gradients as shipped: sway-backgrounds, gnome-backgrounds (WebP, the
              pattern/art ones, 4096x4096), lomiri-wallpapers, desktop-base GRUB backgrounds
  render      SVG wallpapers rendered with rsvg-convert (RGBA as rsvg writes it): desktop-base
              themes (emerald at 5120x2880) and gnome-backgrounds
  alpha       RGBA / palette artwork with transparency: plymouth theme, Debian logos,
              Adwaita icons at 512x512 and 256x256
  screenshot  X11 applications (xterm with text, xcalc, xlogo, xeyes, xedit) under Xvfb at
              400x250 .. 1920x1080, captured with xwd

Every file is re-saved by Pillow with zlib level 6 (compress_level=6, as the photo set), so "PNG
bytes" means the same encoder on both sets; the mode is kept as decoded (RGB, RGBA, P, LA).
Deterministic for given package versions (the screenshots show only files of base-files).
Needs: apt-get, dpkg-deb, python3-pil, librsvg2-bin, xvfb, x11-apps, x11-utils, xterm
(scripts/deps.sh bench installs them).
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from PIL import Image

PACKAGES = ["sway-backgrounds", "gnome-backgrounds", "lomiri-wallpapers", "desktop-base",
            "adwaita-icon-theme"]

# (class, glob under the extracted root); sorted matches, every one taken unless a step is given.
SHIPPED = [
    ("wallpaper", "usr/share/backgrounds/sway/*.png", 1),
    # the dark one of each light/dark pair
    ("wallpaper", "usr/share/backgrounds/gnome/*.webp", 2),
    ("wallpaper", "usr/share/backgrounds/warty-final-ubuntu.png", 1),
    ("wallpaper", "usr/share/desktop-base/*-theme/grub/grub-16x9.png", 1),
    ("wallpaper", "usr/share/desktop-base/*-theme/grub/grub-4x3.png", 3),
    ("alpha", "usr/share/plymouth/themes/emerald/*.png", 1),
    ("alpha", "usr/share/desktop-base/debian-logos/logo-256.png", 1),
    ("alpha", "usr/share/desktop-base/debian-logos/logo-text-version-256.png", 1),
    ("alpha", "usr/share/icons/Adwaita/512x512/*/*.png", 12),
    ("alpha", "usr/share/icons/Adwaita/256x256/*/*.png", 1),
]

# (class, SVG under the extracted root, width, height)
SVGS = [
    ("render", "usr/share/desktop-base/emerald-theme/wallpaper/contents/images/5120x2880.svg", 5120, 2880),
    ("render", "usr/share/desktop-base/futureprototype-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/homeworld-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/lines-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/moonlight-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/softwaves-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/joy-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/desktop-base/spacefun-theme/wallpaper/contents/images/1920x1080.svg", 1920, 1080),
    ("render", "usr/share/backgrounds/gnome/blobs-d.svg", 1920, 1080),
    ("render", "usr/share/backgrounds/gnome/drool-l.svg", 1920, 1080),
    ("render", "usr/share/backgrounds/gnome/dune-d.svg", 2560, 1440),
    ("render", "usr/share/backgrounds/gnome/field-l.svg", 1920, 1080),
    ("render", "usr/share/backgrounds/gnome/oceans.svg", 1366, 768),
]

# Screenshots: (name, screen WxH, [X11 client command lines])
TEXT = "/usr/share/common-licenses/GPL-3"
SCREENS = [
    ("xterm-400x250", (400, 250), [["xterm", "-geometry", "64x16+0+0", "-hold", "-e", "head", "-n", "40", TEXT]]),
    ("xcalc-400x250", (400, 250), [["xcalc", "-geometry", "+0+0"]]),
    ("xedit-640x400", (640, 400), [["xedit", "-geometry", "640x400+0+0", TEXT]]),
    ("desktop-1280x800", (1280, 800), [
        ["xterm", "-geometry", "90x40+0+0", "-hold", "-e", "head", "-n", "200", TEXT],
        ["xcalc", "-geometry", "+700+20"],
        ["xlogo", "-geometry", "300x300+700+420"],
        ["xeyes", "-geometry", "200x150+1050+420"],
    ]),
    ("desktop-1920x1080", (1920, 1080), [
        ["xterm", "-geometry", "120x60+0+0", "-hold", "-e", "head", "-n", "120", "/usr/share/common-licenses/Apache-2.0"],
        ["xedit", "-geometry", "900x700+900+0", TEXT],
        ["xcalc", "-geometry", "+900+720"],
        ["xlogo", "-geometry", "250x250+1300+750"],
    ]),
]


def run(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def fetch(cache):
    root = os.path.join(cache, "root")
    if os.path.exists(os.path.join(cache, ".done")):
        return root
    debs = os.path.join(cache, "debs")
    os.makedirs(debs, exist_ok=True)
    if subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
        run(["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True)
    for deb in sorted(glob.glob(os.path.join(debs, "*.deb"))):
        run(["dpkg-deb", "-x", deb, root])
    open(os.path.join(cache, ".done"), "w").close()
    return root


def save(im, out, cls, name):
    if im.mode not in ("L", "LA", "RGB", "RGBA", "P"):
        im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    d = os.path.join(out, cls)
    os.makedirs(d, exist_ok=True)
    im.save(os.path.join(d, name + ".png"), compress_level=6)


def read_xwd(path):
    """An X11 window dump (ZPixmap, 24/32 bits per pixel TrueColor) as an RGB image."""
    data = open(path, "rb").read()
    be = lambda i: int.from_bytes(data[4 * i:4 * i + 4], "big")
    header_size, fmt, depth, w, h = be(0), be(2), be(3), be(4), be(5)
    byte_order, bpp, bpl, ncolors = be(7), be(11), be(12), be(19)
    masks = (be(14), be(15), be(16))
    if fmt != 2 or bpp != 32 or depth != 24:
        sys.exit(f"{path}: unsupported XWD (format {fmt}, depth {depth}, {bpp} bpp)")
    pix = data[header_size + 12 * ncolors:]
    raw = Image.frombuffer("RGBX", (w, h), pix, "raw", "BGRX" if byte_order == 0 else "XRGB", bpl, 1)
    if masks != (0xFF0000, 0xFF00, 0xFF):
        sys.exit(f"{path}: unexpected colour masks {masks}")
    return raw.convert("RGB")


def screenshots(out):
    """Each screen on its own Xvfb; captured when two dumps in a row are the same (the clients
    have drawn) and every client has mapped a window."""
    for i, (name, (w, h), clients) in enumerate(SCREENS):
        disp = f":{91 + i}"
        with tempfile.TemporaryDirectory() as tmp:
            xvfb = subprocess.Popen(["Xvfb", disp, "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp", "-br",
                                     "-displayfd", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs = []
            try:
                xvfb.stdout.readline()  # the display number: the server is ready
                env = dict(os.environ, DISPLAY=disp)
                for c in clients:
                    procs.append(subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                dump = os.path.join(tmp, "s.xwd")
                prev, stable = None, 0
                for _ in range(600):
                    tree = subprocess.run(["xwininfo", "-root", "-children"], env=env, capture_output=True,
                                          text=True).stdout
                    mapped = sum(1 for line in tree.splitlines() if line.strip().startswith("0x"))
                    run(["xwd", "-root", "-silent", "-out", dump], env=env)
                    cur = open(dump, "rb").read()
                    stable = stable + 1 if (cur == prev and mapped >= len(clients)) else 0
                    prev = cur
                    if stable >= 3:
                        break
                    subprocess.run(["xwininfo", "-root"], env=env, capture_output=True)  # a round trip
                else:
                    sys.exit(f"screen {name}: clients did not settle")
                save(read_xwd(dump), out, "screenshot", name)
            finally:
                for p in procs:
                    p.terminate()
                    p.wait()
                xvfb.terminate()
                xvfb.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "fidelityfs-graphics-debs"))
    args = ap.parse_args()
    for tool in ("rsvg-convert", "Xvfb", "xwd", "xwininfo", "xterm", "xcalc", "xlogo", "xeyes", "xedit"):
        if not shutil.which(tool):
            sys.exit(f"make_graphics_set: {tool} not found (scripts/deps.sh bench installs it)")
    root = fetch(args.cache)
    os.makedirs(args.out, exist_ok=True)
    n = 0
    for cls, pattern, step in SHIPPED:
        files = sorted(glob.glob(os.path.join(root, pattern)))
        if not files:
            sys.exit(f"make_graphics_set: nothing matches {pattern}")
        for f in files[::step]:
            rel = os.path.relpath(f, root)
            name = rel.replace("usr/share/", "").replace("/", "_").rsplit(".", 1)[0]
            with Image.open(f) as im:
                im.load()
                save(im, args.out, cls, name)
            n += 1
    for cls, svg, w, h in SVGS:
        src = os.path.join(root, svg)
        name = svg.replace("usr/share/", "").replace("/", "_").rsplit(".", 1)[0]
        with tempfile.NamedTemporaryFile(suffix=".png") as tmp:
            run(["rsvg-convert", "-w", str(w), "-h", str(h), "-o", tmp.name, src])
            with Image.open(tmp.name) as im:
                im.load()
                save(im, args.out, cls, name if name.endswith(f"{w}x{h}") else f"{name}_{w}x{h}")
        n += 1
    screenshots(args.out)
    n += len(SCREENS)
    print(f"{n} images in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
