#!/usr/bin/env python3
"""Contact sheet of one photo at every level, with the bytes a read returns at each, read
through a mount's /.fidelity/sg/K/ views (what a user sees). Regenerates docs/contact-sheet.png.

  scripts/contact_sheet.py MOUNTPOINT REL_PATH [--out docs/contact-sheet.png] [--crop 256]
"""
import argparse
import io
import os

from PIL import Image, ImageDraw, ImageFont


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mount")
    ap.add_argument("rel")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "contact-sheet.png"))
    ap.add_argument("--crop", type=int, default=256, help="side of the centre crop shown at 1:1")
    a = ap.parse_args()
    levels = int(os.getxattr(os.path.join(a.mount, a.rel), "user.fidelity.levels"))
    tiles = []
    for k in range(1, levels + 1):
        data = open(os.path.join(a.mount, ".fidelity", "sg", str(k), a.rel), "rb").read()
        im = Image.open(io.BytesIO(data)).convert("RGB")
        c = min(a.crop, im.width, im.height)
        x, y = (im.width - c) // 2, (im.height - c) // 2
        tiles.append((k, len(data), im.crop((x, y, x + c, y + c))))
    c = tiles[0][2].width
    label_h = 22
    cols = 5
    rows = (len(tiles) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * (c + 8) + 8, rows * (c + label_h + 8) + 8), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    full = tiles[-1][1]
    for i, (k, size, tile) in enumerate(tiles):
        x, y = 8 + (i % cols) * (c + 8), 8 + (i // cols) * (c + label_h + 8)
        sheet.paste(tile, (x, y))
        draw.text((x, y + c + 4), f"level {k}: {size / 1e3:.1f} kB ({100 * size / full:.0f}%)", fill="black", font=font)
    sheet.save(a.out, optimize=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
