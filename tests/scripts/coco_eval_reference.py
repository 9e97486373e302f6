"""pycocotools' COCOeval (bbox) on a ground-truth and a results file, for tests/yolo/eval/coco_eval_test.

    python coco_eval_reference.py GT.json RES.json

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
    if len(sys.argv) != 3:
        sys.exit('usage: coco_eval_reference.py GT.json RES.json')
    noise = io.StringIO()
    with contextlib.redirect_stdout(noise):
        gt = COCO(sys.argv[1])
        dt = gt.loadRes(sys.argv[2])
        ev = COCOeval(gt, dt, 'bbox')
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
