"""Makes tests/data/rle/polygons.json for tests/io/rle_test (deterministic: seeded).

    python tests/data/rle/make_fixtures.py

Cases for pycocotools' polygon path (rleFrPoly through annToRLE: frPyObjects, then merge): random
polygons of 3 to 12 vertices on small images, with vertices outside the image, on pixel centres and
half pixels, repeated, collinear, concave (stars), tiny (under a pixel), huge, several polygons per
annotation, one or two vertices in a later entry (pycocotools refuses a list whose first entry has
4 numbers or fewer: it takes it for boxes and fails);
merges (union and intersection), uncompressed RLE, and IoU matrices with crowd regions and a size
mismatch. The expected values are what tests/scripts/rle_poly_reference.py prints for them
(pycocotools 2.0.11), stored beside the cases as {"cases": ..., "expected": ...}.
"""
import json
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'scripts'))
import rle_poly_reference  # noqa: E402


def random_polygon(rng, h, w):
    n = rng.randint(3, 12)
    style = rng.random()
    if style < 0.3:  # a star around a centre: concave
        cx, cy = rng.uniform(-5, w + 5), rng.uniform(-5, h + 5)
        r0, r1 = rng.uniform(0.3, w / 2), rng.uniform(0.1, w / 3)
        pts = []
        for i in range(n):
            a = 2 * math.pi * i / n + rng.uniform(0, 0.3)
            r = r0 if i % 2 == 0 else r1
            pts += [round(cx + r * math.cos(a), 3), round(cy + r * math.sin(a), 3)]
        return pts
    if style < 0.45:  # on the half-pixel and quarter-pixel grid (ties of the rounding)
        return [v for _ in range(n) for v in (rng.randint(-8, 4 * w + 8) / 4, rng.randint(-8, 4 * h + 8) / 4)]
    if style < 0.55:  # tiny: within about a pixel
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        return [round(v, 4) for _ in range(n) for v in (cx + rng.uniform(-0.7, 0.7), cy + rng.uniform(-0.7, 0.7))]
    return [round(v, 2) for _ in range(n) for v in (rng.uniform(-0.2 * w, 1.2 * w), rng.uniform(-0.2 * h, 1.2 * h))]


def main():
    rng = random.Random(40)
    polys = []
    sizes = [(1, 1), (1, 7), (7, 1), (5, 5), (12, 17), (17, 12), (32, 32), (40, 23)]
    for i in range(260):
        h, w = sizes[i % len(sizes)]
        k = 1 if rng.random() < 0.75 else rng.randint(2, 3)
        polys.append({'h': h, 'w': w, 'segm': [random_polygon(rng, h, w) for _ in range(k)]})
    edge = [
        (10, 10, [[0, 0, 10, 0, 10, 10, 0, 10]]),              # the whole image
        (10, 10, [[-5, -5, 15, -5, 15, 15, -5, 15]]),          # beyond it on every side
        (10, 10, [[2, 2, 2, 2, 2, 2]]),                        # one point three times
        (10, 10, [[1, 1, 8, 8, 4.5, 4.5]]),                    # collinear
        (10, 10, [[3, 3, 7, 3, 7, 7, 3, 7, 3, 3]]),            # closed explicitly
        (10, 10, [[1, 1, 9, 1, 9, 9, 1, 9, 5, 5]]),            # a notch
        (10, 10, [[1, 1, 9, 1, 9, 9, 1, 9], [3, 3, 7, 3, 7, 7, 3, 7]]),  # overlapping parts: union
        (10, 10, [[1, 1, 9, 1, 9, 9, 1, 9, 1, 1, 0.5]]),       # an odd count: the last number dropped
        (10, 10, [[1, 1, 9, 1, 9, 9], [4, 4], [2, 2, 3, 3]]),  # one and two vertices later on
        (10, 10, [[1, 2, 5, 4, 3], [6, 1, 2, 2]]),             # two vertices (and a half) first
        (10, 10, [[-3.2, 4.7, 2.5, -1.5, 12.4, 13.6]]),        # negative vertices: truncation to zero
        (12, 9, [[0.5, 0.5, 8.5, 0.5, 8.5, 11.5, 0.5, 11.5]]), # on pixel centres
        (12, 9, [[0.1, 0.1, 0.3, 0.1, 0.3, 0.3]]),             # smaller than a pixel
        (480, 640, [[100.25, 50.5, 400.75, 60.1, 620.0, 470.9, 20.3, 300.3, 250, 200]]),
        (3, 4, [[1e4, 1e4, -1e4, 1e4, -1e4, -1e4]]),           # huge
    ]
    polys += [{'h': h, 'w': w, 'segm': s} for h, w, s in edge]
    merges = []
    for i in range(24):
        h, w = sizes[i % len(sizes)]
        merges.append({'h': h, 'w': w, 'intersect': i % 2,
                       'parts': [[random_polygon(rng, h, w)] for _ in range(rng.randint(2, 4))]})
    uncompressed = [{'size': [4, 5], 'counts': [5, 2, 2, 2, 2, 2, 5]}, {'size': [3, 3], 'counts': [0, 9]},
                    {'size': [6, 6], 'counts': [36]}, {'size': [5, 4], 'counts': [3, 0, 2, 15]},
                    {'size': [40, 50], 'counts': [7, 300, 41, 2, 900, 39, 711]}]
    ious = []
    for i in range(30):
        h, w = sizes[4 + i % 4]
        dt = [{'h': h, 'w': w, 'segm': [random_polygon(rng, h, w)]} for _ in range(rng.randint(1, 5))]
        gt = [{'h': h, 'w': w, 'segm': [random_polygon(rng, h, w)]} for _ in range(rng.randint(1, 4))]
        for d in dt[:1]:  # a detection close to a ground truth
            d['segm'] = [[v + rng.uniform(-1, 1) for v in gt[0]['segm'][0]]]
        if i == 0:  # a size mismatch: -1 where the boxes overlap
            dt.append({'h': h + 1, 'w': w, 'segm': gt[0]['segm']})
        ious.append({'dt': dt, 'gt': gt, 'crowd': [int(rng.random() < 0.35) for _ in gt]})
    cases = {'polygons': polys, 'merges': merges, 'uncompressed': uncompressed, 'ious': ious}
    with open(os.path.join(HERE, 'polygons.json'), 'w') as f:
        json.dump({'cases': cases, 'expected': rle_poly_reference.run(cases)}, f, separators=(',', ':'))


if __name__ == '__main__':
    main()
