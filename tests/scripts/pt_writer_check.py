#!/usr/bin/env python3
"""Loads a .pt written by Kestrel (yolo/model/pt_writer.h) as the reference's tools do, for
tests/yolo/model/pt_writer_test.cpp. The reference's source tree (YOLOv5 v7.0) is
$KESTREL_REFERENCE_DIR (default /tmp/yolov5).

  pt_writer_check.py PT H W

torch.load(weights_only=False) of PT; checks its keys and that 'model' is a
models.yolo.DetectionModel or models.yolo.SegmentationModel; compares every module's class,
attributes and tensors' names, dtypes and shapes with the reference's own model of that class built
from the same yaml and halved as strip_optimizer does (exit 1 naming each difference); runs
model.float().eval() on one H x W image whose pixel (y, x) of channel c is
((y * 7 + x * 3 + c * 5) % 17) / 16, and prints one line
  sums <sum of the decoded detections> <sum of |raw outputs|> <nc> <names>
and for a SegmentationModel, whose eval forward also gives the prototypes, one more
  protos <sum of the prototypes> <sum of their magnitudes>
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


def describe(value):
    """An attribute as compared: tensors by dtype and shape, lists of them alike."""
    if isinstance(value, torch.Tensor):
        return ('tensor', value.dtype, tuple(value.shape), type(value).__name__)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return [describe(v) for v in value]
    if isinstance(value, torch.nn.Module):
        return ('module', type(value).__name__)
    return value


def compare_with_reference(model):
    from copy import deepcopy
    from models.yolo import DetectionModel, SegmentationModel
    yaml = deepcopy(model.yaml)
    kind = SegmentationModel if isinstance(model, SegmentationModel) else DetectionModel
    ref = kind(deepcopy(yaml), ch=yaml.get('ch', 3), nc=model.nc).half()
    problems = []
    if yaml != ref.yaml:
        problems.append(f'yaml {yaml} != {ref.yaml}')
    ours = dict(model.named_modules(remove_duplicate=False))
    for name, theirs in ref.named_modules(remove_duplicate=False):
        mine = ours.get(name)
        where = name or 'the model'
        if type(mine) is not type(theirs):
            problems.append(f'{where}: {type(mine)} != {type(theirs)}')
            continue
        for key, value in theirs.__dict__.items():
            if key in ('names', 'yaml_file', 'yaml', '_modules'):
                continue
            if key not in mine.__dict__:
                problems.append(f'{where}: no attribute {key}')
            elif key in ('_parameters', '_buffers'):
                a = {k: describe(v) for k, v in mine.__dict__[key].items()}
                b = {k: describe(v) for k, v in value.items()}
                if a != b:
                    problems.append(f'{where}.{key}: {a} != {b}')
            elif describe(mine.__dict__[key]) != describe(value):
                problems.append(f'{where}.{key}: {describe(mine.__dict__[key])!r} != {describe(value)!r}')
        for key in mine.__dict__:
            # train.py attaches nc, hyp, class_weights (and names) to the model it saves
            if key not in theirs.__dict__ and key not in ('yaml_file', 'nc', 'hyp', 'class_weights'):
                problems.append(f'{where}: extra attribute {key}')
    for key in ('nc', 'hyp', 'class_weights'):
        if key in model.__dict__:
            print(f'{key} {describe(model.__dict__[key])}')
    acts = {id(m.act) for m in model.modules() if type(m).__name__ == 'Conv'}
    if len(acts) != 1:
        problems.append(f'{len(acts)} SiLU objects, where the reference shares one')
    return problems


def main():
    path, h, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    expected = ['epoch', 'best_fitness', 'model', 'ema', 'updates', 'optimizer', 'opt', 'git', 'date']
    if list(ckpt.keys()) != expected:
        sys.exit(f'keys {list(ckpt.keys())}, expected {expected}')
    model = ckpt['model']
    kind = f'{type(model).__module__}.{type(model).__name__}'
    if kind not in ('models.yolo.DetectionModel', 'models.yolo.SegmentationModel'):
        sys.exit(f"'model' is a {kind}")
    if ckpt['epoch'] != -1 or ckpt['ema'] is not None:
        sys.exit('not a stripped checkpoint')
    problems = compare_with_reference(model)
    if problems:
        sys.exit('differences from the reference\'s model:\n' + '\n'.join(problems))
    model = model.float().eval()
    y = torch.arange(h).view(1, 1, h, 1)
    x = torch.arange(w).view(1, 1, 1, w)
    c = torch.arange(3).view(1, 3, 1, 1)
    image = ((y * 7 + x * 3 + c * 5) % 17).float() / 16
    with torch.no_grad():
        out = model(image)
    decoded, raw = (out[0], out[2]) if kind == 'models.yolo.SegmentationModel' else out
    raw_sum = sum(r.abs().sum().item() for r in raw)
    names = ','.join(model.names[i] for i in range(len(model.names)))
    print(f'sums {decoded.double().sum().item():.9g} {raw_sum:.9g} {model.nc} {names}')
    if kind == 'models.yolo.SegmentationModel':
        print(f'protos {out[1].double().sum().item():.9g} {out[1].double().abs().sum().item():.9g}')


if __name__ == '__main__':
    main()
