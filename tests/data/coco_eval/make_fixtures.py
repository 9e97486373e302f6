"""Makes the COCO-evaluation fixtures of tests/yolo/eval/coco_eval_test (deterministic: seeded).

    python tests/data/coco_eval/make_fixtures.py [COCO128_DIR]    # default /work/shared/datasets/coco128

coco128_gt.json / coco128_dt.json: the first 64 images of coco128 with their labels as COCO
annotations (pixels from the normalised labels and the image size, COCO's 91 category ids, ids
from 1), 1 in 12 marked crowd, 1 in 5 with an `area` below w*h (as a polygon's is), and noisy
detections: most objects found with jittered boxes, duplicates, false positives, classes swapped,
scores rounded to 5 digits (ties), some images without detections, one image with 130 detections
(maxDets), and rows of a category the ground truth does not have (dropped).

strings_gt.json / strings_dt.json: 12 images with string ids, 4 categories (one without any
ground truth: -1; one without detections), boxes in all three area ranges, a large crowd region
with several detections inside it, heavy score ties, 140 detections on one image.

What tests/scripts/coco_eval_reference.py prints for each pair (pycocotools 2.0.11, numpy 2.4) is
recorded in coco128_expected.txt and strings_expected.txt.
"""
import json
import os
import random
import sys

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
COCO91 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33,
          34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
          62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]


def jitter(rng, box, s):
    x, y, w, h = box
    return [round(x + rng.gauss(0, s * w), 3), round(y + rng.gauss(0, s * h), 3),
            round(max(1.0, w * (1 + rng.gauss(0, s))), 3), round(max(1.0, h * (1 + rng.gauss(0, s))), 3)]


def random_box(rng, W, H):
    w, h = rng.uniform(4, W / 2), rng.uniform(4, H / 2)
    return [round(rng.uniform(0, W - w), 3), round(rng.uniform(0, H - h), 3), round(w, 3), round(h, 3)]


def dump(obj, name):
    with open(os.path.join(HERE, name), 'w') as f:
        json.dump(obj, f, separators=(',', ':'))


def coco128(root):
    rng = random.Random(128)
    images, anns, dets = [], [], []
    files = sorted(os.listdir(os.path.join(root, 'images/train2017')))[:64]
    for n, name in enumerate(files):
        stem = os.path.splitext(name)[0]
        W, H = Image.open(os.path.join(root, 'images/train2017', name)).size
        images.append({'id': int(stem), 'file_name': name, 'width': W, 'height': H})
        label = os.path.join(root, 'labels/train2017', stem + '.txt')
        rows = [l.split() for l in open(label)] if os.path.exists(label) else []
        for r in rows:
            c, xc, yc, w, h = int(r[0]), *map(float, r[1:])
            box = [round((xc - w / 2) * W, 2), round((yc - h / 2) * H, 2), round(w * W, 2), round(h * H, 2)]
            area = box[2] * box[3] * (rng.uniform(0.5, 0.9) if rng.random() < 0.2 else 1.0)
            crowd = int(rng.random() < 1 / 12)
            anns.append({'id': len(anns) + 1, 'image_id': int(stem), 'category_id': COCO91[c], 'bbox': box,
                         'area': round(area, 2), 'iscrowd': crowd})
            if n % 9 == 4:
                continue  # an image without detections
            if rng.random() < 0.85:
                cat = COCO91[c] if rng.random() < 0.9 else rng.choice(COCO91)
                dets.append({'image_id': int(stem), 'category_id': cat, 'bbox': jitter(rng, box, 0.08),
                             'score': round(rng.random(), 5)})
                if rng.random() < 0.2:  # a duplicate
                    dets.append({'image_id': int(stem), 'category_id': cat, 'bbox': jitter(rng, box, 0.15),
                                 'score': round(rng.random() * 0.5, 2)})
        if n % 9 == 4:
            continue
        for _ in range(rng.randint(0, 6) if n != 7 else 130):  # false positives; image 7: past maxDets
            dets.append({'image_id': int(stem), 'category_id': rng.choice(COCO91[:20]), 'bbox': random_box(rng, W, H),
                         'score': round(rng.random() * 0.6, 3)})
        if n % 10 == 3:
            dets.append({'image_id': int(stem), 'category_id': 12, 'bbox': random_box(rng, W, H), 'score': 0.9})
    cats = [{'id': i, 'name': str(i)} for i in COCO91]
    dump({'images': images, 'annotations': anns, 'categories': cats}, 'coco128_gt.json')
    dump(dets, 'coco128_dt.json')


def strings():
    rng = random.Random(7)
    images, anns, dets = [], [], []
    W, H = 320, 240
    sizes = [(12, 10), (20, 30), (40, 50), (70, 90), (150, 120)]  # small, small, medium, medium, large
    for n in range(12):
        iid = 'img_%s' % 'kdmaxbqewzcf'[n]
        images.append({'id': iid, 'file_name': iid + '.jpg', 'width': W, 'height': H})
        for k in range(rng.randint(1, 5)):
            cat = rng.choice([1, 2, 3])
            w, h = rng.choice(sizes)
            box = [round(rng.uniform(0, W - w), 1), round(rng.uniform(0, H - h), 1), w, h]
            anns.append({'id': len(anns) + 1, 'image_id': iid, 'category_id': cat, 'bbox': box, 'area': w * h,
                         'iscrowd': 0})
            for _ in range(rng.randint(0, 3)):
                dets.append({'image_id': iid, 'category_id': cat if rng.random() < 0.8 else 2,
                             'bbox': jitter(rng, box, 0.1), 'score': rng.choice([0.9, 0.8, 0.5, 0.5, 0.3])})
        if n % 4 == 1:  # a crowd region with detections inside it
            crowd = [10.0, 20.0, 200.0, 150.0]
            anns.append({'id': len(anns) + 1, 'image_id': iid, 'category_id': 1, 'bbox': crowd, 'area': 30000.0,
                         'iscrowd': 1})
            for _ in range(4):
                dets.append({'image_id': iid, 'category_id': 1, 'bbox': [rng.uniform(10, 100), rng.uniform(20, 90), 40, 50],
                             'score': 0.5})
        count = 140 if n == 5 else rng.randint(0, 4)
        for _ in range(count):
            dets.append({'image_id': iid, 'category_id': rng.choice([1, 2, 4]), 'bbox': random_box(rng, W, H),
                         'score': rng.choice([0.5, 0.4, 0.2])})
    cats = [{'id': i, 'name': 'c%d' % i} for i in (1, 2, 3, 4)]  # 4: no ground truth; 3: no detections
    dets = [d for d in dets if d['category_id'] != 3]
    dump({'images': images, 'annotations': anns, 'categories': cats}, 'strings_gt.json')
    dump(dets, 'strings_dt.json')


if __name__ == '__main__':
    coco128(sys.argv[1] if len(sys.argv) > 1 else '/work/shared/datasets/coco128')
    strings()
