"""pycocotools' polygon rasterisation, merge, uncompressed RLE and mask IoU, for tests/io/rle_test.

    python rle_poly_reference.py CASES.json    # or tests/data/rle/polygons.json (its "cases")

CASES.json: {"polygons": [{"h", "w", "segm"}], "merges": [{"h", "w", "parts": [segm, ...], "intersect"}],
"uncompressed": [{"size": [h, w], "counts": [...]}], "ious": [{"dt": [{"h", "w", "segm"}], "gt": [...],
"crowd": [0|1, ...]}]}, where a segm is a list of polygons as a COCO annotation carries it. Prints, as JSON: per polygon case what annToRLE makes of it (frPyObjects, then
merge): its compressed counts, area and toBbox; per merge the compressed counts of merge(parts,
intersect) (each part as annToRLE makes it); per uncompressed RLE frPyObjects' compressed counts;
per iou case maskUtils.iou(dt, gt, crowd) as a list of rows (floats exactly, as json writes repr).
Needs pycocotools (and numpy).
"""
import json
import sys

from pycocotools import mask as mask_utils


def ann_to_rle(segm, h, w):
    return mask_utils.merge(mask_utils.frPyObjects(segm, h, w))


def run(cases):
    out = {'polygons': [], 'merges': [], 'uncompressed': [], 'ious': []}
    for c in cases.get('polygons', []):
        r = ann_to_rle(c['segm'], c['h'], c['w'])
        out['polygons'].append({'counts': r['counts'].decode('utf-8'), 'area': int(mask_utils.area(r)),
                                'bbox': [float(v) for v in mask_utils.toBbox(r)]})
    for c in cases.get('merges', []):
        parts = [ann_to_rle(p, c['h'], c['w']) for p in c['parts']]
        out['merges'].append(mask_utils.merge(parts, intersect=c['intersect'])['counts'].decode('utf-8'))
    for c in cases.get('uncompressed', []):
        r = mask_utils.frPyObjects(c, c['size'][0], c['size'][1])
        out['uncompressed'].append(r['counts'].decode('utf-8'))
    for c in cases.get('ious', []):
        dt = [ann_to_rle(d['segm'], d['h'], d['w']) for d in c['dt']]
        gt = [ann_to_rle(g['segm'], g['h'], g['w']) for g in c['gt']]
        o = mask_utils.iou(dt, gt, c['crowd'])
        out['ious'].append([[float(v) for v in row] for row in o])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: rle_poly_reference.py CASES.json')
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    cases = cases.get('cases', cases)  # a fixture file: its cases
    json.dump(run(cases), sys.stdout, separators=(',', ':'))
    print()


if __name__ == '__main__':
    main()
