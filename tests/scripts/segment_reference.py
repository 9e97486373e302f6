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

  step W.pt OUT.safetensors [--no-before]
                    one training step as segment/train.py takes it, for step parity
                    (tests/yolo/train/segment_step_parity_test.cpp): W.pt's model loaded as
                    attempt_load(fuse=False) loads it (float32), in train mode with every parameter
                    trainable, on the fixed batch below (deterministic algorithms, seed 0):
                    pred, proto = model(imgs / 255); utils/segment/loss.py
                    ComputeLoss(model, overlap=True)(pred + proto, targets, masks) with model.hyp
                    the reference's hyp.scratch-low scaled as segment/train.py scales it (box *=
                    3/nl, cls *= nc/80*3/nl, obj *= (160/640)**2*3/nl, label_smoothing 0);
                    backward; clip_grad_norm_(max_norm=10); one step of smart_optimizer(model,
                    'SGD', 0.01, 0.937, 5e-4 * bs * accumulate / 64) with accumulate =
                    max(round(64 / bs), 1), i.e. decay 5e-4 (no warmup: lr 0.01 in every group).
                    It writes `images` (uint8 NCHW as built), `targets`, `masks` (float32, as the
                    loss reads them), `loss` (the reference's loss, loss * bs), `items` (lbox,
                    lseg, lobj, lcls), `grad.NAME` (each parameter's gradient before clipping),
                    `grad_norm` (the total norm clip_grad_norm_ returned), `after.NAME` (each
                    parameter after the step), `step.NAME` (after minus before: the step itself,
                    which `after.NAME` shows only to the weights' scale), `buffers.NAME`
                    (BatchNorm running statistics and counts after the forward) and, unless
                    --no-before, `before.NAME` (W.pt's float16 widened)
  summarize FULL.safetensors OUT.safetensors
                    a step file's summary for the repository (tests/scripts/step_summary.py):
                    targets, masks, loss, items and grad_norm as they are, and of every other
                    tensor NAME (images too) `NAME.stats` (sum, norm, largest magnitude) and
                    `NAME.samples` (64 values spread from first to last)

The step's batch (no data pipeline; the C++ test builds the same from the same numbers): 4 images
of 160x160, pixel (b, c, y, x) = (37b + 61c + 3y + 2x + xy // 16) % 256 as uint8; 3, 5, 4 and 3
boxes per image (STEP_BOXES: image, class, x, y, w, h normalised; the targets in float32); the
overlap label masks (4, 40, 40) that the loader makes with --mask-ratio 4: per image, the pixels
whose centre lies inside its k-th box (1-based, in the targets' order) hold k, later boxes painted
over earlier ones.

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
sys.path.insert(0, str(HERE.parent.parent / 'scripts'))
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


# The step's boxes: image, class, x, y, w, h (normalised), by image. Chosen away from every tie of
# the loss's float arithmetic: x and y end in a digit other than 0 or 5 and w and h are multiples of
# 0.02, so that no centre lies on a half or whole grid cell at strides 8, 16 and 32 (build_targets'
# neighbour offsets), no box edge on a prototype pixel's edge (crop_mask) or centre (the masks
# below), and no size at exactly 4 times an anchor (anchor_t).
STEP_BOXES = [
    (0, 0, 0.331, 0.452, 0.46, 0.62), (0, 15, 0.648, 0.457, 0.40, 0.38), (0, 2, 0.721, 0.803, 0.16, 0.22),
    (1, 45, 0.497, 0.503, 0.98, 0.96), (1, 1, 0.304, 0.276, 0.20, 0.14), (1, 7, 0.701, 0.749, 0.38, 0.42),
    (1, 60, 0.153, 0.778, 0.22, 0.36), (1, 79, 0.852, 0.198, 0.18, 0.20),
    (2, 3, 0.507, 0.401, 0.52, 0.20), (2, 3, 0.376, 0.622, 0.16, 0.54), (2, 56, 0.651, 0.149, 0.10, 0.22),
    (2, 9, 0.074, 0.068, 0.10, 0.08),
    (3, 0, 0.503, 0.527, 0.30, 0.84), (3, 62, 0.248, 0.749, 0.48, 0.46), (3, 11, 0.777, 0.606, 0.44, 0.30)]
STEP_BATCH, STEP_IMG, STEP_MASK = 4, 160, 40


def step_batch():
    """The step's images (uint8 NCHW), targets (float32 [15, 6]) and overlap masks (float32): pixel
    (r, c) of image i's mask is inside a box when |(c + 0.5) / 40 - x| < w / 2 and
    |(r + 0.5) / 40 - y| < h / 2 (float64), and holds the 1-based index of the last such box."""
    b, c, y, x = torch.meshgrid(torch.arange(STEP_BATCH), torch.arange(3), torch.arange(STEP_IMG),
                                torch.arange(STEP_IMG), indexing='ij')
    images = ((37 * b + 61 * c + 3 * y + 2 * x + (x * y) // 16) % 256).to(torch.uint8)
    targets = torch.tensor(STEP_BOXES, dtype=torch.float32)
    masks = torch.zeros(STEP_BATCH, STEP_MASK, STEP_MASK, dtype=torch.float32)
    count = [0] * STEP_BATCH
    for i, _, bx, by, bw, bh in STEP_BOXES:
        count[i] += 1
        for r in range(STEP_MASK):
            for col in range(STEP_MASK):
                if abs((col + 0.5) / STEP_MASK - bx) < bw / 2 and abs((r + 0.5) / STEP_MASK - by) < bh / 2:
                    masks[i, r, col] = count[i]
    return images, targets, masks


def step(weights, out, before=True):
    import yaml
    from models.experimental import attempt_load
    from utils.general import init_seeds
    from utils.segment.loss import ComputeLoss
    from utils.torch_utils import smart_optimizer
    from safetensors_io import write_safetensors
    init_seeds(0, deterministic=True)  # as segment/train.py: deterministic algorithms
    model = attempt_load(weights, device='cpu', fuse=False)  # float32, eval mode
    model.train()
    for p in model.parameters():
        p.requires_grad = True
    images, targets, masks = step_batch()
    x = images.float() / 255  # segment/train.py's imgs.float() / 255
    assert torch.equal(x, (images.double() / 255).float())  # what the C++ side computes

    # hyp.scratch-low as segment/train.py scales it; nbs 64.
    hyp = yaml.safe_load(open(os.path.join(REFERENCE, 'data', 'hyps', 'hyp.scratch-low.yaml')))
    nl, nc, bs = model.model[-1].nl, model.nc, STEP_BATCH
    accumulate = max(round(64 / bs), 1)
    hyp['weight_decay'] *= bs * accumulate / 64
    hyp['box'] *= 3 / nl
    hyp['cls'] *= nc / 80 * 3 / nl
    hyp['obj'] *= (STEP_IMG / 640) ** 2 * 3 / nl
    hyp['label_smoothing'] = 0.0
    model.hyp = hyp

    names = [k for k, _ in model.named_parameters()]
    tensors = {'images': images.clone(), 'targets': targets.clone(), 'masks': masks.clone()}
    start = {k: p.detach().clone() for k, p in model.named_parameters()}
    if before:
        tensors.update({f'before.{k}': p for k, p in start.items()})
    optimizer = smart_optimizer(model, 'SGD', hyp['lr0'], hyp['momentum'], hyp['weight_decay'])
    compute_loss = ComputeLoss(model, overlap=True)
    pred = model(x)  # train mode: (p, proto)
    loss, items = compute_loss(pred, targets, masks=masks)
    loss.backward()
    tensors.update({f'grad.{k}': p.grad.detach().clone() for k, p in model.named_parameters()})
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    optimizer.step()
    tensors['loss'] = loss.detach().reshape([]).float()
    tensors['items'] = items.detach().float()
    tensors['grad_norm'] = grad_norm.detach().reshape([]).float()
    tensors.update({f'after.{k}': p.detach().clone() for k, p in model.named_parameters()})
    tensors.update({f'step.{k}': p.detach() - start[k] for k, p in model.named_parameters()})
    tensors.update({f'buffers.{k}': b.detach().clone() for k, b in model.named_buffers()})
    write_safetensors(out, tensors, {
        'weights': Path(weights).name, 'data': 'segment_reference.py step_batch(): 4 images at 160, 15 boxes',
        'imgsz': STEP_IMG, 'batch': bs, 'loss': 'utils/segment/loss.py ComputeLoss(model, overlap=True)',
        'hyp': {k: hyp[k] for k in ('box', 'cls', 'obj', 'cls_pw', 'obj_pw', 'anchor_t', 'fl_gamma',
                                    'label_smoothing', 'weight_decay')},
        'clip': 'clip_grad_norm_(max_norm=10.0); grad.* are before clipping',
        'optimizer': f"smart_optimizer(model, 'SGD', {hyp['lr0']}, {hyp['momentum']}, {hyp['weight_decay']}), one step",
        'before': 'included' if before else 'omitted: the float16 weights of the .pt, widened',
        'torch': torch.__version__, 'parameters': len(names)})
    print(f'loss {loss.item()!r} items {items.tolist()} grad_norm {grad_norm.item()!r}')
    print(f'wrote {out}: {len(tensors)} tensors, {os.path.getsize(out)} bytes')


if __name__ == '__main__':
    command = sys.argv[1] if len(sys.argv) > 1 else ''
    if command == 'make' and len(sys.argv) == 3:
        make(sys.argv[2])
    elif command == 'forward' and len(sys.argv) == 3:
        forward(sys.argv[2])
    elif command == 'step' and len(sys.argv) in (4, 5) and sys.argv[4:] in ([], ['--no-before']):
        step(sys.argv[2], sys.argv[3], before='--no-before' not in sys.argv[4:])
    elif command == 'summarize' and len(sys.argv) == 4:
        import step_summary
        step_summary.summarize(sys.argv[2], sys.argv[3], keep=('targets', 'masks', 'loss', 'items', 'grad_norm'))
    elif command == 'summary' and len(sys.argv) >= 3:
        summary(sys.argv[2:])
    else:
        sys.exit(__doc__)
