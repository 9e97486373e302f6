#!/usr/bin/env python3
"""Records the reference's --image-weights draws for tests/yolo/data/image_weights_test.cpp.

YOLOv5 v7.0's train.py, at the start of every epoch with --image-weights (one process):

    cw = model.class_weights.cpu().numpy() * (1 - maps) ** 2 / nc
    iw = labels_to_image_weights(dataset.labels, nc=nc, class_weights=cw)
    dataset.indices = random.choices(range(dataset.n), weights=iw, k=dataset.n)

with model.class_weights = labels_to_class_weights(dataset.labels, nc) * nc (float32) and Python's
random seeded by init_seeds(opt.seed + 1 + RANK), RANK -1 in one process. This script runs those
lines with the reference's own labels_to_class_weights and labels_to_image_weights on small
synthetic label sets, for a few epochs with given per-class mAPs, and writes what they produce.

    /usr/bin/python3 scripts/record_image_weights.py --yolov5 /tmp/yolov5 tests/yolo/data/image_weights_draws.txt

Output, per case: `case NAME NC SEED IMAGES EPOCHS`, one `labels C...` line per image (its classes),
`class_weights W...` (model.class_weights), then per epoch `maps M...`, `image_weights W...` and
`draw I...`. Numbers are Python reprs (they read back exactly).
"""
import argparse
import os
import random
import sys

import numpy as np


def cases():
    rng = np.random.default_rng(5)
    out = []
    # A few images by hand: an image without labels, repeated classes, a class without labels.
    small = [[0, 1], [1], [], [0, 0, 3], [1, 1, 1], [3], [0], [], [1, 3], [0, 1, 3]]
    out.append(('small', 4, 0, small, [np.zeros(4), np.array([0.5, 0.25, 0.0, 0.9]), np.array([0.1, 0.8, 0.3, 0.2])]))
    # COCO-like: 80 classes, skewed frequencies, many labels per image.
    freq = np.exp(-np.arange(80) / 12.0)
    freq /= freq.sum()
    coco = [list(rng.choice(80, size=int(rng.integers(0, 12)), p=freq)) for _ in range(300)]
    out.append(('coco_like', 80, 7, coco, [np.zeros(80), rng.random(80), rng.random(80)]))
    # A seed above 2^32 (two key words for the Mersenne Twister).
    wide = [list(rng.integers(0, 3, size=int(rng.integers(1, 4)))) for _ in range(50)]
    out.append(('wide_seed', 3, 2 ** 40 + 5, wide, [np.zeros(3), np.array([0.3, 0.6, 0.9])]))
    # One class (--single-cls), some images empty.
    single = [[0] * int(k) for k in rng.integers(0, 4, size=40)]
    out.append(('single_class', 1, 3, single, [np.zeros(1), np.array([0.7]), np.array([0.2])]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--yolov5', default=os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5'))
    ap.add_argument('out')
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.yolov5))
    from utils.general import labels_to_class_weights, labels_to_image_weights

    lines = []
    for name, nc, seed, images, maps_per_epoch in cases():
        # dataset.labels: one float32 [k, 5] array per image (class, x, y, w, h)
        labels = [np.array([[c, 0.5, 0.5, 0.1, 0.1] for c in classes], dtype=np.float32).reshape(-1, 5)
                  for classes in images]
        n = len(labels)
        random.seed(seed)
        class_weights = labels_to_class_weights(labels, nc) * nc  # model.class_weights
        lines.append(f'case {name} {nc} {seed} {n} {len(maps_per_epoch)}')
        lines += ['labels ' + ' '.join(str(int(c)) for c in classes) for classes in images]
        lines.append('class_weights ' + ' '.join(repr(float(w)) for w in class_weights.numpy()))
        for maps in maps_per_epoch:
            cw = class_weights.cpu().numpy() * (1 - maps) ** 2 / nc
            iw = labels_to_image_weights(labels, nc=nc, class_weights=cw)
            indices = random.choices(range(n), weights=iw, k=n)
            lines.append('maps ' + ' '.join(repr(float(m)) for m in maps))
            lines.append('image_weights ' + ' '.join(repr(float(w)) for w in iw))
            lines.append('draw ' + ' '.join(str(i) for i in indices))
    with open(args.out, 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
