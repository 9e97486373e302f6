"""pycocotools' COCOeval on a ground-truth and a results file, for tests/yolo/eval/coco_eval_test.

    python coco_eval_reference.py GT.json RES.json [bbox|segm]    # default bbox

Prints summarize()'s 12 lines, then the 12 stats one per line as repr() gives them (every digit
of the double), so the C++ evaluation can be compared to the last bit. pycocotools' own progress
lines are kept off stdout. Needs pycocotools (and numpy).
"""
import contextlib
import io
import sys

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit('usage: coco_eval_reference.py GT.json RES.json [bbox|segm]')
    iou_type = sys.argv[3] if len(sys.argv) == 4 else 'bbox'
    noise = io.StringIO()
    with contextlib.redirect_stdout(noise):
        gt = COCO(sys.argv[1])
        dt = gt.loadRes(sys.argv[2])
        ev = COCOeval(gt, dt, iou_type)
        ev.evaluate()
        ev.accumulate()
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary):
        ev.summarize()
    sys.stdout.write(summary.getvalue())
    for s in ev.stats:
        print(repr(float(s)))


if __name__ == '__main__':
    main()
