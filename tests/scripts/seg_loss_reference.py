#!/usr/bin/env python3
"""The fixture of tests/yolo/train/seg_loss_test.cpp: YOLOv5 v7.0's segmentation loss
(utils/segment/loss.py ComputeLoss) on fixed inputs, with its gradients, for overlap masks and
per-target masks. The reference's source tree is $KESTREL_REFERENCE_DIR (default /tmp/yolov5).

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \\
        tests/scripts/seg_loss_reference.py tests/data/seg_loss_reference.safetensors

The case: a Segment head's raw outputs shaped as a 48x48 input gives them at strides 8 and 16
(bs 2, na 3, nc 3, nm 32: levels (2, 3, 6, 6, 40) and (2, 3, 3, 3, 40)), seeded normal values;
prototypes (2, 32, 12, 12) NCHW; 7 targets over the two images (sorted by image, as the loader's
collate gives them); ground-truth masks drawn as ellipses in the targets' boxes: overlap index
masks (2, 12, 12) at the prototypes' size, per-target masks (7, 18, 18) that the loss resizes by
nearest neighbour. hyp: box 0.05, obj 1.0, cls 0.5, cls_pw 1.5, obj_pw 1.2, anchor_t 4.0,
fl_gamma 0, label_smoothing 0.1. The head stands in for a model: ComputeLoss reads only its hyp, its
parameters' device and the last module's nl, na, nc, nm, stride and anchors.

Written (float32 unless said): pred.0, pred.1, protos (NCHW), targets [7, 6], anchors (2, 3, 2)
in grid units, masks.overlap uint8 (2, 12, 12), masks.targets uint8 (7, 18, 18); for each mode
M in overlap, targets: M.loss [1] (the reference's loss * bs), M.items [4] (lbox, lseg, lobj,
lcls), M.grad.pred.0, M.grad.pred.1 and M.grad.protos (NCHW), d loss / d input.
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

REFERENCE = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / 'bench' / 'pytorch'))
sys.path.insert(0, str(HERE.parent.parent / 'scripts'))
import reference_shims  # noqa: E402

reference_shims.apply(REFERENCE)
sys.path.insert(0, REFERENCE)
from safetensors_io import write_safetensors  # noqa: E402

HYP = {'box': 0.05, 'obj': 1.0, 'cls': 0.5, 'cls_pw': 1.5, 'obj_pw': 1.2, 'anchor_t': 4.0,
       'fl_gamma': 0.0, 'label_smoothing': 0.1}
BS, NA, NC, NM, MH, MW = 2, 3, 3, 32, 12, 12
GRIDS = [(6, 6), (3, 3)]
STRIDES = [8.0, 16.0]
ANCHORS_PX = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119]]
# image, class, x, y, w, h (normalised), sorted by image.
TARGETS = [[0, 0, 0.30, 0.35, 0.40, 0.30],
           [0, 2, 0.70, 0.60, 0.25, 0.55],
           [0, 1, 0.55, 0.20, 0.12, 0.15],
           [1, 1, 0.45, 0.50, 0.60, 0.70],
           [1, 0, 0.20, 0.80, 0.20, 0.18],
           [1, 2, 0.82, 0.30, 0.30, 0.22],
           [1, 1, 0.62, 0.72, 0.09, 0.33]]


class Head(nn.Module):
    """What ComputeLoss reads of a Segment head."""

    def __init__(self):
        super().__init__()
        self.nl, self.na, self.nc, self.nm = len(GRIDS), NA, NC, NM
        self.stride = torch.tensor(STRIDES)
        anchors = torch.tensor(ANCHORS_PX, dtype=torch.float32).view(self.nl, NA, 2)
        self.register_buffer('anchors', anchors / self.stride.view(-1, 1, 1))
        self.weight = nn.Parameter(torch.zeros(1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.ModuleList([Head()])
        self.hyp = HYP


def ellipse(h, w, box):
    """Pixels of an (h, w) mask inside the ellipse inscribed in the normalised xywh box."""
    x, y, bw, bh = box
    ys = (torch.arange(h, dtype=torch.float64) + 0.5) / h
    xs = (torch.arange(w, dtype=torch.float64) + 0.5) / w
    d = ((xs[None, :] - x) / (bw / 2)) ** 2 + ((ys[:, None] - y) / (bh / 2)) ** 2
    return d <= 1


def make_masks():
    overlap = torch.zeros(BS, MH, MW, dtype=torch.uint8)
    per_target = torch.zeros(len(TARGETS), 18, 18, dtype=torch.uint8)
    count = [0] * BS
    for i, t in enumerate(TARGETS):
        b = int(t[0])
        count[b] += 1
        overlap[b][ellipse(MH, MW, t[2:])] = count[b]  # later targets drawn over earlier ones
        per_target[i][ellipse(18, 18, t[2:])] = 1
    return overlap, per_target


def main(out):
    from utils.segment.loss import ComputeLoss
    torch.manual_seed(0)
    preds = [torch.randn(BS, NA, ny, nx, 5 + NC + NM) for ny, nx in GRIDS]
    protos = torch.randn(BS, NM, MH, MW)
    targets = torch.tensor(TARGETS, dtype=torch.float32)
    masks_overlap, masks_targets = make_masks()
    model = Model()
    tensors = {f'pred.{i}': p for i, p in enumerate(preds)}
    tensors.update({'protos': protos, 'targets': targets, 'anchors': model.model[-1].anchors,
                    'masks.overlap': masks_overlap, 'masks.targets': masks_targets})
    for mode, masks in (('overlap', masks_overlap), ('targets', masks_targets)):
        ps = [p.clone().requires_grad_() for p in preds]
        pr = protos.clone().requires_grad_()
        compute_loss = ComputeLoss(model, overlap=mode == 'overlap')
        loss, items = compute_loss((ps, pr), targets, masks.float())
        loss.backward()
        tensors[f'{mode}.loss'] = loss.detach()
        tensors[f'{mode}.items'] = items
        for i, p in enumerate(ps):
            tensors[f'{mode}.grad.pred.{i}'] = p.grad
        tensors[f'{mode}.grad.protos'] = pr.grad
        print(f'{mode}: loss {loss.item():.6f} items {items.tolist()}', file=sys.stderr)
    write_safetensors(out, tensors, {'source': 'tests/scripts/seg_loss_reference.py',
                                     'torch': torch.__version__, 'hyp': HYP})


if __name__ == '__main__':
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
