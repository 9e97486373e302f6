#!/usr/bin/env python3
"""Reference-side helpers for the segmentation validation parity test
(tests/scripts/seg_val_parity_test.cpp); the reference's source tree (YOLOv5 v7.0) is
$KESTREL_REFERENCE_DIR (default /tmp/yolov5):

  train DATA IMG BATCH EPOCHS OUT [SEED]
                                    the reference's segment/train.py from scratch (yolov5n-seg,
                                    seed 0, CPU, no plots, no validation) with every augmentation
                                    off (hyp.scratch-low otherwise), so that a few images are
                                    learnt by heart; its stripped last.pt copied to OUT
  resumable DATA IMG BATCH OUT
                                    as train, for 2 epochs with --save-period 1, then the run's
                                    weights/last.pt replaced by its epoch0.pt (the checkpoint of
                                    epoch 0, not stripped): a run segment/train.py --resume would
                                    continue for one more epoch; its folder is OUT (the run's
                                    opt.yaml there, last.pt in OUT/weights)
  val W.pt DATA IMG BATCH CONF DIR [json]
                                    the reference's segment/val.py run() on the CPU with its NMS
                                    wall-clock cut-off switched off (so that its numbers do not
                                    depend on the machine's speed); prints the "all" row as it
                                    does, then its eight means in full; with `json`, --save-json
                                    (masks made at the input size, and <W>_predictions.json)
"""
import os
import shutil
import sys
from pathlib import Path

import torch  # noqa: F401  (imported before the reference, as its scripts do)

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
sys.path.insert(0, REFERENCE)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'bench' / 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REFERENCE)


def stop_nms_clock():
    import time
    import types
    import utils.general
    utils.general.time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith('_')})
    utils.general.time.time = lambda: 0.0


def train(data, imgsz, batch, epochs, out, seed=0, resumable=False):
    import yaml
    reference_shims.stub_tensorboard()
    sys.path.insert(0, str(Path(REFERENCE) / 'segment'))
    import importlib
    reference_train = importlib.import_module('segment.train')
    from utils.callbacks import Callbacks
    out = Path(out).resolve()
    project = out.parent / (out.stem + '_run')
    project.mkdir(parents=True, exist_ok=True)
    hyp = yaml.safe_load((Path(REFERENCE) / 'data' / 'hyps' / 'hyp.scratch-low.yaml').read_text())
    hyp.update(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, translate=0.0, scale=0.0, fliplr=0.0, mosaic=0.0)
    (project / 'hyp.yaml').write_text(yaml.safe_dump(hyp, sort_keys=False))
    os.chdir(REFERENCE)
    opt = reference_train.parse_opt(True)
    for k, v in dict(data=data, cfg=str(Path(REFERENCE) / 'models' / 'segment' / 'yolov5n-seg.yaml'), weights='', imgsz=imgsz, batch_size=batch,
                     epochs=epochs, device='cpu', workers=2, seed=seed, project=str(project), name='full',
                     exist_ok=True, noplots=True, noval=True, hyp=str(project / 'hyp.yaml')).items():
        setattr(opt, k, v)
    if resumable:
        opt.save_period = 1
    reference_train.main(opt, Callbacks())
    if resumable:
        run = project / 'full'
        shutil.copy(run / 'weights' / 'epoch0.pt', run / 'weights' / 'last.pt')
        shutil.rmtree(out, ignore_errors=True)
        shutil.move(str(run), str(out))
        return
    shutil.copy(project / 'full' / 'weights' / 'last.pt', out)


def val(weights, data, imgsz, batch, conf, save_dir, save_json=False):
    stop_nms_clock()
    import importlib
    reference_val = importlib.import_module('segment.val')
    results, _, _ = reference_val.run(data=data, weights=weights, imgsz=imgsz, batch_size=batch, conf_thres=conf,
                                      iou_thres=0.6, device='cpu', workers=2, project=save_dir, name='reference',
                                      exist_ok=True, half=False, plots=False, save_json=save_json)
    print('full precision: ' + ' '.join(repr(float(x)) for x in results[:8]))


if __name__ == '__main__':
    command = sys.argv[1]
    if command == 'train':
        train(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
              int(sys.argv[7]) if len(sys.argv) > 7 else 0)
    elif command == 'resumable':
        train(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), 2, sys.argv[5], resumable=True)
    elif command == 'val':
        val(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7],
            save_json=sys.argv[8:] == ['json'])
    else:
        sys.exit(f'unknown command {command}')
