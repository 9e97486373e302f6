#!/usr/bin/env python3
"""Converts Kestrel weights (.safetensors) into a checkpoint (.pt) of ultralytics YOLOv5 (v7.0).

The input may be a Kestrel training checkpoint (its EMA weights are taken, as the reference's
val.py takes a checkpoint's EMA), a stripped final checkpoint, or plain weights (for instance from
scripts/convert_ultralytics.py). The output is the dictionary the reference's strip_optimizer
leaves: 'model' a models.yolo.DetectionModel built from the model yaml with the reference's own
source, in float16, with 'names' and 'nc' set; no optimizer. The reference's val.py, detect.py
and train.py --weights load it as one of their own.

The model yaml, class count and names come from the file's metadata (Kestrel checkpoints and
converted weights carry them); --cfg, --nc and --names (or --data) supply or override them.

Optional tool: it needs PyTorch and the reference's source tree (the checkpoint pickles the
reference's classes).

    python3 scripts/convert_to_ultralytics.py runs/train/exp/weights/best.safetensors best.pt \\
        --yolov5 ~/src/yolov5
"""
import argparse
import json
import os
import sys
from datetime import datetime

from safetensors_io import read_safetensors


def model_description(metadata, path):
    """(yaml text, nc, names, hyp, options) from a Kestrel file's metadata; None where absent."""
    if 'options' in metadata:  # a training checkpoint, full or stripped
        options = json.loads(metadata['options'])
        hyp = json.loads(metadata['hyp']) if 'hyp' in metadata else None
        return options.get('cfg_yaml'), options.get('nc'), options.get('names'), hyp, options
    nc = int(metadata['nc']) if 'nc' in metadata else None
    names = json.loads(metadata['names']) if 'names' in metadata else None
    return metadata.get('model_yaml'), nc, names, None, None


def weights_prefix(tensors):
    if 'ema.model.0.conv.weight' in tensors:
        return 'ema.'
    if 'model.model.0.conv.weight' in tensors:
        return 'model.'
    return ''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('weights', help='Kestrel checkpoint or weights, e.g. best.safetensors')
    ap.add_argument('output', help='.pt file to write')
    ap.add_argument('--yolov5', required=True, help='path of the reference source tree')
    ap.add_argument('--cfg', help='model yaml, for files that do not carry theirs')
    ap.add_argument('--nc', type=int, help='class count, for files that do not carry theirs')
    ap.add_argument('--names', help='class names, comma separated')
    ap.add_argument('--data', help='dataset yaml to take the class names from')
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.yolov5))
    try:
        import torch
        import yaml
    except ImportError as e:
        sys.exit(f'{e}: PyTorch and PyYAML are needed to write a .pt checkpoint')
    try:
        from models.yolo import DetectionModel
    except ImportError as e:
        sys.exit(f'{args.yolov5}: cannot import the reference\'s models.yolo ({e}); '
                 'give --yolov5 the root of the YOLOv5 v7.0 source tree')

    tensors, metadata = read_safetensors(args.weights)
    cfg_text, nc, names, hyp, options = model_description(metadata, args.weights)
    if args.cfg:
        with open(args.cfg) as f:
            cfg_text = f.read()
    if cfg_text is None:
        sys.exit(f'{args.weights} carries no model yaml: give --cfg models/yolov5s.yaml (and --nc)')
    cfg = yaml.safe_load(cfg_text)
    nc = args.nc or nc or cfg.get('nc')
    if args.names:
        names = args.names.split(',')
    elif args.data:
        with open(args.data) as f:
            names = yaml.safe_load(f)['names']
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names)]
    if names is None:
        names = [f'class{i}' for i in range(nc)]
    if len(names) != nc:
        sys.exit(f'{args.weights}: {len(names)} class names for {nc} classes; give --names or --data to match')

    prefix = weights_prefix(tensors)
    state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    model = DetectionModel(cfg, ch=cfg.get('ch', 3), nc=nc)
    expected = model.state_dict()
    problems = [f'missing {k}' for k in expected if k not in state]
    problems += [f'unexpected {k}' for k in state if k not in expected]
    problems += [f'{k}: shape {list(state[k].shape)} in the file, {list(v.shape)} in the model'
                 for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if problems:
        sys.exit(f'{args.weights} does not fit the model yaml ({len(problems)} problems):\n  ' +
                 '\n  '.join(problems[:20]) + '\ngive the --cfg and --nc the weights were trained with')
    model.load_state_dict(state, strict=True)
    model.nc = nc
    model.names = dict(enumerate(names))
    if hyp is not None:
        model.hyp = hyp
    model.half()
    for p in model.parameters():
        p.requires_grad = False

    ckpt = {'epoch': -1, 'best_fitness': None, 'model': model, 'ema': None, 'updates': None,
            'optimizer': None, 'opt': options, 'git': None, 'date': datetime.now().isoformat()}
    torch.save(ckpt, args.output + '.tmp')
    os.replace(args.output + '.tmp', args.output)
    print(f'{args.output}: {len(state)} tensors ({prefix or "plain "}weights of {args.weights}), {nc} classes, '
          f'{os.path.getsize(args.output) / 1e6:.1f} MB')


if __name__ == '__main__':
    main()
