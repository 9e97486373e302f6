#!/usr/bin/env python3
"""The reference's own `train.py --resume LAST` (YOLOv5 v7.0 at $KESTREL_REFERENCE_DIR, default
/tmp/yolov5) on a run directory Kestrel wrote, offline (bench/pytorch/reference_shims.py), for
tests/yolo/train/reference_files_test.cpp; `segment/train.py --resume LAST` where LAST holds a
SegmentationModel (tests/yolo/train/segment_reference_files_test.cpp):

  reference_resume.py LAST.pt

Loads LAST with torch.load as the reference does and prints its optimizer's param-group lrs,
then runs train.py's main() with --resume LAST: it reads the run's opt.yaml and LAST (model, EMA,
updates, optimizer state dict), continues to the epochs opt.yaml names and strips the
checkpoints. Exit status 0 when it ran to its end.
"""
import os
import sys
from pathlib import Path

import torch

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
sys.path.insert(0, REFERENCE)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'bench' / 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REFERENCE)
reference_shims.stub_tensorboard()


def main():
    last = sys.argv[1]
    ckpt = torch.load(last, map_location='cpu')
    groups = ckpt['optimizer']['param_groups']
    print('checkpoint epoch', ckpt['epoch'], 'updates', ckpt['updates'], 'groups',
          ' '.join(str(len(g['params'])) for g in groups), 'states', len(ckpt['optimizer']['state']))
    os.chdir(REFERENCE)
    import importlib
    segment = type(ckpt['model']).__name__ == 'SegmentationModel'
    print('task', 'segment' if segment else 'detect')
    train = importlib.import_module('segment.train' if segment else 'train')
    sys.argv = ['train.py', '--resume', last]
    opt = train.parse_opt(True)
    train.main(opt)
    print('reference resume done')


if __name__ == '__main__':
    main()
