#!/usr/bin/env python3
"""A COCO-sized detection set made from a small one by hard links (no bytes copied).

    make_coco_sized.py --source ../shared/datasets/coco128 --out /tmp/coco118k --images 118287

Writes OUT/images/train2017/NNNNNN_<name>.jpg and OUT/labels/train2017/NNNNNN_<name>.txt (links to
the source's images and labels, cycling through them), OUT/images/val2017 likewise with --val
images (default 500), and OUT/data.yaml naming both splits with the source's class names. The
source must be on the same filesystem as OUT. Re-running with the same arguments is a no-op."""
import argparse
import os
import sys


def source_pairs(source):
    images = os.path.join(source, "images", "train2017")
    labels = os.path.join(source, "labels", "train2017")
    names = sorted(n for n in os.listdir(images) if n.lower().endswith((".jpg", ".jpeg", ".png")))
    if not names:
        sys.exit(f"make_coco_sized: no images under {images}")
    pairs = []
    for n in names:
        label = os.path.join(labels, os.path.splitext(n)[0] + ".txt")
        pairs.append((os.path.join(images, n), label if os.path.exists(label) else None))
    return pairs


def link_split(pairs, out, split, count):
    img_dir = os.path.join(out, "images", split)
    lab_dir = os.path.join(out, "labels", split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(lab_dir, exist_ok=True)
    for i in range(count):
        image, label = pairs[i % len(pairs)]
        stem = f"{i:06d}_" + os.path.splitext(os.path.basename(image))[0]
        target = os.path.join(img_dir, stem + os.path.splitext(image)[1])
        if not os.path.exists(target):
            os.link(image, target)
        if label:
            target = os.path.join(lab_dir, stem + ".txt")
            if not os.path.exists(target):
                os.link(label, target)


def class_names(source):
    # The source's own yaml (coco128/coco128.yaml here, beside the folder in the reference's
    # layout); numbered names when there is none.
    base = os.path.basename(os.path.normpath(source))
    for candidate in (os.path.join(source, base + ".yaml"), os.path.join(source, "data.yaml"),
                      os.path.join(source, "..", base + ".yaml")):
        if os.path.exists(candidate):
            text = open(candidate).read()
            if "names:" in text:
                return text[text.index("names:"):]
    return "names: {" + ", ".join(f"{i}: class{i}" for i in range(80)) + "}\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--images", type=int, default=118287)
    p.add_argument("--val", type=int, default=500)
    a = p.parse_args()
    pairs = source_pairs(a.source)
    link_split(pairs, a.out, "train2017", a.images)
    link_split(pairs, a.out, "val2017", a.val)
    with open(os.path.join(a.out, "data.yaml"), "w") as f:
        f.write(f"path: {os.path.abspath(a.out)}\ntrain: images/train2017\nval: images/val2017\n")
        f.write(class_names(a.source))
    print(f"{a.out}: {a.images} train and {a.val} val images linked from {a.source}")


if __name__ == "__main__":
    main()
