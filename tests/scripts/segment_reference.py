#!/usr/bin/env python3
"""Reference-side fixtures for Kestrel's segmentation models (YOLOv5 v7.0's SegmentationModel,
Segment and Proto); the reference's source tree is $KESTREL_REFERENCE_DIR (default /tmp/yolov5):

  make OUT.pt       a seeded yolov5n-seg for COCO's 80 classes (default names '0'..'79'):
                    torch.manual_seed(0), SegmentationModel(cfg='models/segment/yolov5n-seg.yaml',
                    nc=80), every BatchNorm's weight, bias and running statistics randomised from
                    a generator seeded 1 (so that BN folding and the forward are not trivial),
                    saved as the reference's strip_optimizer leaves a finished run's best.pt:
                    'model' in float16, 'ema', 'optimizer', 'best_fitness', 'updates' None,
                    'epoch' -1
  forward W.pt      W.pt's model in float32 and eval mode on the fixed input below, printing what
                    tests/yolo/model/segmentation_model_test.cpp records: per raw level and for
                    the decoded detections and the prototypes their shape, sum, sum of absolute
                    values and a few samples (flat index in the reference's layout, value)
  summary SIZE...   for each of n, s, m, l, x: the model_info line at 640, the fused one, the
                    parameter and module counts, and the layer table's rows (with thop, when it
                    can be imported)

The fixed input (1, 3, 96, 128): x[0, c, y, x] = ((7c + 3y + 5x) % 17) / 16.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \\
        tests/scripts/segment_reference.py make tests/data/yolov5n_seg_seeded.pt

(PyTorch 2.15 from PyPI in /opt/kestrel-bench; bench/pytorch/reference_shims.py lets v7.0 import
offline on it.)
"""
import os
import sys
from pathlib import Path

import torch

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / 'bench' / 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REFERENCE)
sys.path.insert(0, REFERENCE)
for extra in ('/tmp/thoplib',):  # thop, where it was installed with pip --target
    if os.path.isdir(extra):
        sys.path.insert(0, extra)


def randomise_bn(model, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.num_batches_tracked.fill_(321)


def make(out):
    from models.yolo import SegmentationModel
    torch.manual_seed(0)
    model = SegmentationModel(cfg=os.path.join(REFERENCE, 'models', 'segment', 'yolov5n-seg.yaml'), nc=80)
    randomise_bn(model, torch.Generator().manual_seed(1))
    for p in model.parameters():
        p.requires_grad = False
    ckpt = {'epoch': -1, 'best_fitness': None, 'model': model.half(), 'ema': None, 'updates': None,
            'optimizer': None, 'opt': {'epochs': 1}, 'git': {}, 'date': None}
    torch.save(ckpt, out)
    print(f'{out}: {os.path.getsize(out)} bytes, {len(model.state_dict())} tensors')


def fixed_input():
    c, y, x = torch.meshgrid(torch.arange(3), torch.arange(96), torch.arange(128), indexing='ij')
    return (((7 * c + 3 * y + 5 * x) % 17).float() / 16).unsqueeze(0)


def describe(name, t):
    flat = t.detach().double().flatten()
    picks = [0, flat.numel() // 3, flat.numel() // 2, flat.numel() - 1]
    samples = ', '.join(f'{{{i}, {flat[i].item():.9g}}}' for i in picks)
    print(f'{name} shape {list(t.shape)} sum {flat.sum().item():.9g} abs {flat.abs().sum().item():.9g} '
          f'samples {samples}')


def forward(weights):
    model = torch.load(weights, map_location='cpu')['model'].float().eval()
    with torch.no_grad():
        decoded, protos, raw = model(fixed_input())
    for i, r in enumerate(raw):
        describe(f'raw{i}', r)
    describe('decoded', decoded)
    describe('decoded_boxes', decoded[..., :4])
    describe('decoded_scores', decoded[..., 4:85])
    describe('decoded_masks', decoded[..., 85:])
    describe('protos', protos)


def summary(sizes):
    import logging
    import utils.torch_utils
    from models.yolo import SegmentationModel
    try:
        import thop
        utils.torch_utils.thop = thop
    except ImportError:
        pass
    logging.getLogger('yolov5').setLevel(logging.INFO)
    for s in sizes:
        torch.manual_seed(0)
        model = SegmentationModel(os.path.join(REFERENCE, 'models', 'segment', f'yolov5{s}-seg.yaml'))
        print(s, 'modules', len(list(model.modules())), 'parameters', sum(p.numel() for p in model.parameters()))
        model.fuse()


if __name__ == '__main__':
    command = sys.argv[1] if len(sys.argv) > 1 else ''
    if command == 'make' and len(sys.argv) == 3:
        make(sys.argv[2])
    elif command == 'forward' and len(sys.argv) == 3:
        forward(sys.argv[2])
    elif command == 'summary' and len(sys.argv) >= 3:
        summary(sys.argv[2:])
    else:
        sys.exit(__doc__)
