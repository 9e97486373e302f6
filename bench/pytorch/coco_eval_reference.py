#!/usr/bin/env python3
"""pycocotools' COCOeval (bbox) on bench_kernels' CocoEval5000 set, timed as that row times
Kestrel's evaluate_coco: evaluate() + accumulate() on the loaded ground truth and results (the
loading, COCO() + loadRes(), is timed apart). Prints one JSON line, with stats[0] and stats[1],
which must equal the AP and AP50 the Kestrel row prints on stderr.

    bench_kernels --benchmark_filter=CocoEval5000    # writes $TMPDIR/kestrel_coco_eval_bench/{gt,dt}.json
    python bench/pytorch/coco_eval_reference.py [--dir DIR] [--pycocotools DIR] [--iou-type bbox|segm]

With --iou-type segm and --dir $TMPDIR/kestrel_coco_segm_bench, the same for CocoEvalSegm1000.

The set (5000 images of 640x480, ~7 objects, ~100 detections each, 80 categories) is drawn by
bench/yolo/eval/coco_eval_bench.cpp from a fixed seed; this script only reads it. --pycocotools
puts a folder holding pycocotools (pip install --target) on the path, so that the bench
environment itself is left alone.
"""
import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--dir', default=os.path.join(tempfile.gettempdir(), 'kestrel_coco_eval_bench'))
    ap.add_argument('--pycocotools', default='', help='a folder holding pycocotools (pip install --target)')
    ap.add_argument('--summary', action='store_true', help='also print summarize() on stderr')
    ap.add_argument('--iou-type', default='bbox', choices=('bbox', 'segm'),
                    help="COCOeval's iouType (segm: CocoEvalSegm1000's set, --dir $TMPDIR/kestrel_coco_segm_bench)")
    args = ap.parse_args()
    if args.pycocotools:
        sys.path.insert(0, args.pycocotools)
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt_path, dt_path = os.path.join(args.dir, 'gt.json'), os.path.join(args.dir, 'dt.json')
    if not os.path.exists(gt_path):
        sys.exit(f'no {gt_path}: run bench_kernels --benchmark_filter=CocoEval5000 first')
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        t0 = time.perf_counter()
        gt = COCO(gt_path)
        dt = gt.loadRes(dt_path)
        t1 = time.perf_counter()
        ev = COCOeval(gt, dt, args.iou_type)
        ev.evaluate()
        t2 = time.perf_counter()
        ev.accumulate()
        t3 = time.perf_counter()
        ev.summarize()
    if args.summary:
        sys.stderr.write(quiet.getvalue())
    print(json.dumps({'name': 'coco_eval_reference', 'images': len(gt.getImgIds()), 'objects': len(gt.anns),
                      'detections': len(dt.anns), 'load_s': round(t1 - t0, 3), 'evaluate_s': round(t2 - t1, 3),
                      'accumulate_s': round(t3 - t2, 3), 'time_ms': round((t3 - t1) * 1e3, 1),
                      'AP': repr(float(ev.stats[0])), 'AP50': repr(float(ev.stats[1]))}))


if __name__ == '__main__':
    main()
