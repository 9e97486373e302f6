"""The reference's segmentation data functions on fixed inputs, for the numbers recorded in
tests/yolo/data/seg_labels_test.cpp and tests/yolo/data/seg_masks_test.cpp.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python tests/scripts/seg_data_reference.py

Reads the reference tree at $KESTREL_REFERENCE_DIR or /tmp/yolov5 and, when present,
coco128-seg at $KESTREL_COCO128_SEG or /work/shared/datasets/coco128-seg. Prints, for each case,
boxes and points with repr() (full precision), and for each mask its pixel sum, the sum of the
flat indices (y * w + x) of its set pixels and a few pixel values.
"""
import os
import random
import sys

import numpy as np

REF = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'bench', 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REF)
from utils.dataloaders import verify_image_label  # noqa: E402
from utils.general import resample_segments, segment2box, segments2boxes, xyn2xy  # noqa: E402
from utils.segment.augmentations import random_perspective  # noqa: E402
from utils.segment.dataloaders import polygon2mask, polygons2masks, polygons2masks_overlap  # noqa: E402

H, W = 480, 640
POLYGONS = [  # pixels
    np.array([[10.5, 20.25], [300.75, 40.5], [250.0, 400.125], [30.0, 350.0]]),  # quad
    np.array([[320.9, 100.2], [600.3, 120.7], [610.0, 460.5], [450.5, 300.0], [330.1, 470.9]]),  # concave
    np.array([[100.0, 100.0], [200.0, 100.0], [200.0, 180.0], [100.0, 180.0]]),  # small box in the quad
    np.array([[-50.0, -20.0], [90.0, 10.0], [40.0, 60.0]]),  # partly outside
]


def mask_stats(name, m):
    m = np.asarray(m).astype(np.int64)
    ys, xs = np.nonzero(m)
    flat = int((ys * m.shape[1] + xs).sum())
    print(f'{name}: shape {m.shape} sum {int(m.sum())} index_sum {flat} '
          f'px(0,0) {m[0, 0]} px(h/2,w/2) {m[m.shape[0] // 2, m.shape[1] // 2]} px(30,50) {m[30 % m.shape[0], 50 % m.shape[1]]}')


def main():
    # segments2boxes on normalised float32 polygons
    segs = [np.array([0.1, 0.2, 0.5, 0.1, 0.9, 0.6, 0.3, 0.8], dtype=np.float32).reshape(-1, 2),
            np.array([0.3, 0.3, 0.35, 0.31, 0.33, 0.4], dtype=np.float32).reshape(-1, 2)]
    for b in segments2boxes(segs):
        print('segments2boxes', [repr(float(v)) for v in b.astype(np.float32)])
    # resample_segments
    for n in (1000, 7):
        r = resample_segments([POLYGONS[0].copy()], n=n)[0]
        idx = [0, 1, 2, 333, 500, 998, 999] if n == 1000 else list(range(7))
        for i in idx:
            print(f'resample n={n} [{i}]', repr(float(r[i, 0])), repr(float(r[i, 1])))
    # segment2box
    print('segment2box', [repr(float(v)) for v in segment2box(POLYGONS[3], 320, 240)])
    print('segment2box x0', [repr(float(v)) for v in np.ravel(segment2box(np.array([[0.0, 5.0], [0.0, 9.0], [-1.0, 3.0]]), 320, 240))])
    # masks
    for ratio in (1, 4):
        for i, p in enumerate(POLYGONS):
            mask_stats(f'polygon2mask r={ratio} [{i}]', polygon2mask((H, W), [p.reshape(-1)], color=1, downsample_ratio=ratio))
    mask_stats('polygon2mask color=255 r=2 [1]', polygon2mask((H, W), [POLYGONS[1].reshape(-1)], color=255, downsample_ratio=2))
    for ratio in (1, 4):
        m, idx = polygons2masks_overlap((H, W), [p.copy() for p in POLYGONS], downsample_ratio=ratio)
        print(f'overlap r={ratio} index', list(map(int, idx)))
        mask_stats(f'overlap r={ratio}', m)
        print(f'overlap r={ratio} counts', [int((m == v).sum()) for v in range(len(POLYGONS) + 1)])
    # 200 nested squares: uint8 arithmetic that wraps past 127 overlapping instances
    nested = [np.array([[i, i], [419 - i, i], [419 - i, 419 - i], [i, 419 - i]], float) for i in range(200)]
    m, idx = polygons2masks_overlap((420, 420), nested)
    print('nested 200', m.dtype, 'sum', int(m.astype(np.int64).sum()), 'px', m[210, 210], m[130, 130], m[127, 127], m[0, 0])
    # the small square over the large one, and an instance outside the image (area 0)
    small = [np.array([[2, 2], [3, 2], [3, 3], [2, 3]], float), np.array([[0, 0], [9, 0], [9, 9], [0, 9]], float),
             np.array([[20, 20], [20, 20], [20, 20]], float)]
    m, idx = polygons2masks_overlap((10, 10), small)
    print('small over large index', list(map(int, idx)), 'px', m[2, 2], m[5, 5], 'counts', [int((m == v).sum()) for v in range(4)])
    # random_perspective with segments on a 320x240 image: the draws (printed, in the reference's
    # order) come from random.seed(seed); the C++ test builds the same matrix from them.
    for seed, persp in ((7, 0.0), (11, 0.0005)):
        hyp = dict(degrees=10, translate=0.1, scale=0.5, shear=2, perspective=persp)
        random.seed(seed)
        draws = [random.uniform(-persp, persp), random.uniform(-persp, persp), random.uniform(-10, 10),
                 random.uniform(0.5, 1.5), random.uniform(-2, 2), random.uniform(-2, 2),
                 random.uniform(0.4, 0.6), random.uniform(0.4, 0.6)]
        print(f'warp seed={seed} draws', [repr(v) for v in draws])
        segs = [p * 0.5 for p in POLYGONS]
        targets = np.array([[i, *s.min(0), *s.max(0)] for i, s in enumerate(segs)])
        random.seed(seed)
        _, t, ns = random_perspective(np.zeros((240, 320, 3), np.uint8), targets, [s.copy() for s in segs], **hyp)
        for row, sg in zip(t, ns):
            print(f'warp seed={seed} kept', [repr(float(v)) for v in row], len(sg),
                  [(repr(float(sg[k, 0])), repr(float(sg[k, 1]))) for k in (0, 500, 999)])
    # coco128-seg: the first three label files, segments as the reference reads them, at 640x480
    root = os.environ.get('KESTREL_COCO128_SEG', '/work/shared/datasets/coco128-seg')
    lbdir = os.path.join(root, 'labels', 'train2017')
    if os.path.isdir(lbdir):
        for name in sorted(os.listdir(lbdir))[:3]:
            stem = os.path.splitext(name)[0]
            im = os.path.join(root, 'images', 'train2017', stem + '.jpg')
            _, lb, shape, segments, nm, nf, ne, nc, msg = verify_image_label((im, os.path.join(lbdir, name), ''))
            print(f'coco {name}: {len(lb)} labels, {len(segments)} segments, points {[len(s) for s in segments]} msg {msg!r}')
            print(f'coco {name} box0', [repr(float(v)) for v in lb[0]])
            px = [xyn2xy(s, W, H) for s in segments]
            ms = polygons2masks((H, W), px, color=1, downsample_ratio=4)
            print(f'coco {name} masks r=4 sums', [int(m.sum()) for m in ms])
            m, idx = polygons2masks_overlap((H, W), px, downsample_ratio=4)
            print(f'coco {name} overlap r=4 index', list(map(int, idx)))
            mask_stats(f'coco {name} overlap r=4', m)


if __name__ == '__main__':
    main()
