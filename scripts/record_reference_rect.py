#!/usr/bin/env python3
"""Records the reference's rectangular batches for coco128 (tests/yolo/data/rect_batches_test.cpp).

YOLOv5's LoadImagesAndLabels with rect=True lists a split's images sorted by path, takes each
image's EXIF-corrected (width, height) with PIL, sorts them by aspect ratio h / w with numpy's
default argsort, and gives each batch one letterbox shape. This script repeats those steps with
numpy itself (run it under numpy 1.24, whose argsort is the introsort Kestrel reproduces; see
scripts/record_numpy_argsort.py), for val's settings (batch 32, pad 0.5) and --rect training's
(batch 16, pad 0.0) at 320 pixels.

    /usr/bin/python3 scripts/record_reference_rect.py /work/shared/datasets/coco128/images/train2017 \
        tests/yolo/data/coco128_rect_320.txt

Output: per setting, `setting BATCH IMG STRIDE PAD`, `order NAME...` (file names in batch order),
`shapes H W H W ...` (one pair per batch).
"""
import glob
import os
import sys

import numpy as np
from PIL import Image

IMG_FORMATS = {"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm"}
ORIENTATION = 274  # EXIF tag


def size_upright(path):
    with Image.open(path) as im:
        w, h = im.size
        try:
            if im._getexif()[ORIENTATION] in (6, 8):
                w, h = h, w
        except Exception:
            pass
    return w, h


def rect_batches(wh, batch, img, stride, pad):
    ar = wh[:, 1] / wh[:, 0]
    order = ar.argsort()
    ar = ar[order]
    n = len(ar)
    nb = (n + batch - 1) // batch
    shapes = []
    for b in range(nb):
        part = ar[b * batch:(b + 1) * batch]
        lo, hi = part.min(), part.max()
        shapes.append([hi, 1] if hi < 1 else [1, 1 / lo] if lo > 1 else [1, 1])
    shapes = np.ceil(np.array(shapes) * img / stride + pad).astype(int) * stride
    return order, shapes


def main():
    if np.__version__.split(".")[:2] != ["1", "24"]:
        sys.exit(f"numpy {np.__version__}: record under numpy 1.24 (its argsort is the reference's)")
    folder, out = sys.argv[1], sys.argv[2]
    files = sorted(f for f in glob.glob(os.path.join(folder, "**", "*.*"), recursive=True)
                   if f.rsplit(".", 1)[-1].lower() in IMG_FORMATS)
    wh = np.array([size_upright(f) for f in files])
    lines = []
    for batch, img, stride, pad in ((32, 320, 32, 0.5), (16, 320, 32, 0.0)):
        order, shapes = rect_batches(wh, batch, img, stride, pad)
        lines.append(f"setting {batch} {img} {stride} {pad}")
        lines.append("order " + " ".join(os.path.basename(files[i]) for i in order))
        lines.append("shapes " + " ".join(f"{h} {w}" for h, w in shapes))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
