"""Makes the segmentation fixtures of tests/yolo/eval/coco_eval_test (deterministic: seeded).

    python tests/data/coco_eval/make_segm_fixtures.py

segm_gt.json: 14 images of several sizes (one with an object as compressed RLE only), 4
categories (4 without ground truth), objects as polygons (one to three parts, stars and convex
shapes, small, medium and large, vertices outside the image), some with an `area` from the
polygon's shoelace formula rather than its mask, and a crowd region as uncompressed RLE (COCO's crowd
form).
segm_dt.json: results as segment/val.py writes them: bbox (rounded), score (rounded, ties) and the
mask as compressed RLE: jittered copies of the objects' polygons rasterised by pycocotools, some
duplicates, false positives, detections inside the crowd regions, 110 detections on one image
(maxDets), a category swapped now and then. segm_nobox_dt.json: the same rows without their bbox
(loadRes then takes each row's area and box from its mask).

What tests/scripts/coco_eval_reference.py prints for (segm_dt, segm), (segm_dt, bbox),
(segm_nobox_dt, segm) and (segm_nobox_dt, bbox) (pycocotools 2.0.11, numpy 2.4) is recorded in
segm_expected.txt, segm_bbox_expected.txt, segm_nobox_expected.txt and segm_nobox_bbox_expected.txt.
"""
import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
from pycocotools import mask as mask_utils

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(obj, name):
    with open(os.path.join(HERE, name), 'w') as f:
        json.dump(obj, f, separators=(',', ':'))


def shape(rng, cx, cy, r):
    n = rng.randint(3, 10)
    star = rng.random() < 0.4
    pts = []
    for i in range(n):
        a = 2 * math.pi * i / n + rng.uniform(0, 0.4)
        rr = r * (0.45 if star and i % 2 else 1.0) * rng.uniform(0.8, 1.2)
        pts += [round(cx + rr * math.cos(a), 2), round(cy + rr * 0.8 * math.sin(a), 2)]
    return pts


def shoelace(p):
    xs, ys = p[0::2], p[1::2]
    return abs(sum(xs[i] * ys[(i + 1) % len(xs)] - xs[(i + 1) % len(xs)] * ys[i] for i in range(len(xs)))) / 2


def rle_of(segm, h, w):
    return mask_utils.merge(mask_utils.frPyObjects(segm, h, w))


def compressed(rle):
    return {'size': [int(rle['size'][0]), int(rle['size'][1])], 'counts': rle['counts'].decode('utf-8')}


def main():
    rng = random.Random(4040)
    images, anns, dets = [], [], []
    sizes = [(120, 160), (150, 200), (131, 97), (240, 320)]
    radii = [3, 5, 12, 25, 45, 70]  # small, small, medium, medium, medium/large, large
    for n in range(14):
        H, W = sizes[n % len(sizes)]
        iid = 100 + n
        image = {'id': iid, 'file_name': '%d.jpg' % iid, 'width': W, 'height': H}
        images.append(image)
        objects = []  # (category, rle, segm polygons or None)
        if n == 13:
            m = np.zeros((H, W), dtype=np.uint8, order='F')
            m[10:40, 20:60] = 1
            rle = compressed(mask_utils.encode(m))
            anns.append({'id': len(anns) + 1, 'image_id': iid, 'category_id': 2, 'segmentation': rle,
                         'area': float(mask_utils.area(rle)), 'bbox': [20, 10, 40, 30], 'iscrowd': 0})
            dets.append({'image_id': iid, 'category_id': 2, 'bbox': [21.0, 10.0, 39.0, 31.0], 'score': 0.7,
                         'segmentation': compressed(mask_utils.encode(np.asfortranarray(np.roll(m, 2, axis=1))))})
            continue
        for k in range(rng.randint(1, 5)):
            cat = rng.choice([1, 2, 3])
            r = rng.choice(radii)
            cx, cy = rng.uniform(-5, W + 5), rng.uniform(-5, H + 5)
            parts = [shape(rng, cx, cy, r)]
            if rng.random() < 0.2:
                parts.append(shape(rng, cx + r, cy, r / 2))
            rle = rle_of(parts, H, W)
            if mask_utils.area(rle) == 0:
                continue
            area = float(mask_utils.area(rle)) if rng.random() < 0.7 else round(sum(shoelace(p) for p in parts), 2)
            box = [float(v) for v in mask_utils.toBbox(rle)]
            anns.append({'id': len(anns) + 1, 'image_id': iid, 'category_id': cat, 'segmentation': parts,
                         'area': area, 'bbox': box, 'iscrowd': 0})
            objects.append((cat, parts))
        if n % 4 == 1:  # a crowd region (uncompressed RLE) with detections inside it
            m = np.zeros((H, W), dtype=np.uint8, order='F')
            m[5:H // 2, 5:W // 2] = 1
            m[20:30, 30:40] = 0
            # uncompressed counts: the runs of the column-major pixels
            flat = m.flatten(order='F')
            runs, cur, run = [], 0, 0
            for v in flat:
                if v != cur:
                    runs.append(run)
                    run, cur = 0, v
                run += 1
            runs.append(run)
            anns.append({'id': len(anns) + 1, 'image_id': iid, 'category_id': 1,
                         'segmentation': {'size': [H, W], 'counts': runs}, 'area': float(m.sum()),
                         'bbox': [5, 5, W // 2 - 5, H // 2 - 5], 'iscrowd': 1})
            for _ in range(3):
                cx, cy = rng.uniform(10, W / 2 - 10), rng.uniform(10, H / 2 - 10)
                objects.append((1, [shape(rng, cx, cy, rng.choice([4, 8]))]))
        for cat, parts in objects:
            for copy in range(1 if rng.random() < 0.8 else 2):
                if rng.random() < 0.15 and copy == 0:
                    continue  # missed
                j = 0.03 if copy == 0 else 0.12
                span = max(max(p[0::2]) - min(p[0::2]) for p in parts) + 1
                moved = [[round(v + rng.gauss(0, j * span), 2) for v in p] for p in parts]
                rle = rle_of(moved, H, W)
                box = [round(float(v) + rng.uniform(-0.5, 0.5), 3) for v in mask_utils.toBbox(rle)]
                dets.append({'image_id': iid, 'category_id': cat if rng.random() < 0.9 else rng.choice([1, 2, 3, 4]),
                             'bbox': box, 'score': rng.choice([0.9, 0.75, 0.5, 0.5, 0.3, round(rng.random(), 5)]),
                             'segmentation': compressed(rle)})
        for _ in range(110 if n == 6 else rng.randint(0, 4)):  # false positives; image 106: past maxDets
            cx, cy = rng.uniform(0, W), rng.uniform(0, H)
            rle = rle_of([shape(rng, cx, cy, rng.choice(radii))], H, W)
            dets.append({'image_id': iid, 'category_id': rng.choice([1, 2, 4]),
                         'bbox': [float(v) for v in mask_utils.toBbox(rle)],
                         'score': rng.choice([0.6, 0.4, 0.2, round(rng.random() * 0.5, 3)]), 'segmentation': compressed(rle)})
    cats = [{'id': i, 'name': 'c%d' % i} for i in (1, 2, 3, 4)]
    dump({'images': images, 'annotations': anns, 'categories': cats}, 'segm_gt.json')
    dump(dets, 'segm_dt.json')
    dump([{k: v for k, v in d.items() if k != 'bbox'} for d in dets], 'segm_nobox_dt.json')
    script = os.path.join(HERE, '..', '..', 'scripts', 'coco_eval_reference.py')
    for dt, kind, out in (('segm_dt', 'segm', 'segm_expected'), ('segm_dt', 'bbox', 'segm_bbox_expected'),
                          ('segm_nobox_dt', 'segm', 'segm_nobox_expected'),
                          ('segm_nobox_dt', 'bbox', 'segm_nobox_bbox_expected')):
        text = subprocess.run([sys.executable, script, os.path.join(HERE, 'segm_gt.json'),
                               os.path.join(HERE, dt + '.json'), kind], check=True, capture_output=True, text=True).stdout
        with open(os.path.join(HERE, out + '.txt'), 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
