#!/usr/bin/env python3
"""The reference YOLOv5 v7.0's segment/predict.py on a few small images, for
tests/yolo/cli/segment_predict_test.cpp; the reference's source tree is $KESTREL_REFERENCE_DIR
(default /tmp/yolov5):

  images DIR        writes the two test images (PNG, so that both sides read the same pixels):
                    a.png 100x70 and b.png 72x96 (width x height), smooth colour patterns with a
                    few filled shapes, deterministic
  run W.pt SRC OUT NAME CONF IMGSZ MAXDET [--retina-masks]
                    segment/predict.py's run() on the CPU: --weights W.pt --source SRC --imgsz
                    IMGSZ --conf-thres CONF --max-det MAXDET --save-txt --save-conf --hide-labels
                    --project OUT --name NAME --exist-ok (and --retina-masks when given). The labels'
                    text is left out because OpenCV's Hershey glyphs differ between its releases
                    (opencv-python's zero is slashed, Debian's 4.6 is not). It leaves what
                    predict.py writes: OUT/NAME/<image> (the drawn images) and
                    OUT/NAME/labels/<stem>.txt (cls, the polygon's normalised x y pairs, conf)

The fixture tests/data/segment_predict/ holds the images and two recorded runs of
tests/data/yolov5n_seg_seeded.pt (plain/ and retina/), made with

    P=/opt/kestrel-bench/bin/python; D=tests/data/segment_predict
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64
    $P tests/scripts/segment_predict_reference.py images $D/images
    $P tests/scripts/segment_predict_reference.py run tests/data/yolov5n_seg_seeded.pt $D/images $D plain 0.000195 128 6
    $P tests/scripts/segment_predict_reference.py run tests/data/yolov5n_seg_seeded.pt $D/images $D retina 0.000195 128 6 --retina-masks

(PyTorch 2.x from PyPI in /opt/kestrel-bench; bench/pytorch/reference_shims.py lets v7.0 import
offline on it.)
"""
import os
import sys
from pathlib import Path

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / 'bench' / 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REFERENCE)
sys.path.insert(0, REFERENCE)


def pattern(h, w, shift):
    import cv2
    import numpy as np
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([127 + 120 * np.sin((x + shift) / 9.0), 127 + 120 * np.cos((y - shift) / 7.0),
                    127 + 120 * np.sin((x + y) / 13.0)], axis=2).round().astype(np.uint8)
    cv2.rectangle(img, (w // 5, h // 4), (w // 2, 3 * h // 4), (20, 200, 240), -1)
    cv2.circle(img, (2 * w // 3, h // 2), min(h, w) // 5, (230, 40, 60), -1)
    return img


def images(out):
    import cv2
    os.makedirs(out, exist_ok=True)
    cv2.imwrite(os.path.join(out, 'a.png'), pattern(70, 100, 0))
    cv2.imwrite(os.path.join(out, 'b.png'), pattern(96, 72, 17))


def run(weights, source, out, name, conf, imgsz, max_det, retina):
    from segment.predict import run as predict
    predict(weights=weights, source=source, imgsz=(imgsz, imgsz), conf_thres=conf, max_det=max_det, device='cpu',
            save_txt=True, save_conf=True, hide_labels=True, project=out, name=name, exist_ok=True,
            retina_masks=retina)


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == 'images':
        images(sys.argv[2])
    elif len(sys.argv) in (9, 10) and sys.argv[1] == 'run':
        w, src, out, name, conf, imgsz, max_det = sys.argv[2:9]
        run(w, src, out, name, float(conf), int(imgsz), int(max_det), sys.argv[9:] == ['--retina-masks'])
    else:
        sys.exit(__doc__)
