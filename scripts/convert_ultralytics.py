#!/usr/bin/env python3
"""Converts an ultralytics YOLOv5 (v7.0) checkpoint (.pt) into Kestrel weights (.safetensors).

The names stay those of the reference's state_dict (model.0.conv.weight, ...), convolution weights
stay OIHW, the anchors stay in stride units: exactly what `kestrel model --weights` and
`kestrel train --weights` read. The checkpoint's EMA is taken where it has one (as the reference's
val.py does), else its model. The file's metadata carries the model yaml ("model_yaml"), the class
count ("nc"), the class names ("names", a JSON list) and the yaml file the model was built from,
where it was ("model_yaml_file"), so `kestrel val` and `kestrel detect` need
no --cfg and print names. The way back is scripts/convert_to_ultralytics.py.

Optional tool: it needs PyTorch and the reference's source tree (a checkpoint pickles the
reference's classes, so they must be importable); nothing in Kestrel's build needs it.

    python3 scripts/convert_ultralytics.py yolov5s.pt yolov5s.safetensors --yolov5 ~/src/yolov5
"""
import argparse
import json
import os
import sys

from safetensors_io import write_safetensors


def class_names(model, nc):
    names = getattr(model, 'names', None)
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names)]
    if not isinstance(names, (list, tuple)) or (nc is not None and len(names) != nc):
        return None
    return [str(n) for n in names]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('checkpoint', help='reference checkpoint, e.g. yolov5s.pt')
    ap.add_argument('output', help='safetensors file to write')
    ap.add_argument('--yolov5', help='path of the reference source tree (to unpickle its classes)')
    ap.add_argument('--half', action='store_true', help='store floating-point tensors as float16')
    args = ap.parse_args()
    if args.yolov5:
        sys.path.insert(0, os.path.abspath(args.yolov5))
    try:
        import torch
        import yaml
    except ImportError as e:
        sys.exit(f'{e}: PyTorch and PyYAML are needed to read a .pt checkpoint')
    try:
        ckpt = torch.load(args.checkpoint, map_location='cpu', weights_only=False)
    except TypeError:  # PyTorch < 1.13 has no weights_only
        ckpt = torch.load(args.checkpoint, map_location='cpu')
    except ModuleNotFoundError as e:
        sys.exit(f'{args.checkpoint}: {e}; pass --yolov5 PATH to the reference source tree')
    model = ckpt
    if isinstance(ckpt, dict):
        model = ckpt.get('ema') or ckpt.get('model')
        if model is None:
            sys.exit(f'{args.checkpoint}: no "model" or "ema" entry; is this a YOLOv5 checkpoint?')
    state = model.float().state_dict()
    if args.half:
        state = {k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}
    cfg = getattr(model, 'yaml', None)
    nc = getattr(model, 'nc', None) or (cfg or {}).get('nc')
    metadata = {'source': os.path.basename(args.checkpoint), 'format': 'kestrel-yolov5'}
    if nc is not None:
        metadata['nc'] = str(int(nc))
    if isinstance(cfg, dict):
        metadata['model_yaml'] = yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None)
    if isinstance(getattr(model, 'yaml_file', None), str):  # names the model's summary line
        metadata['model_yaml_file'] = model.yaml_file
    names = class_names(model, nc)
    if names is not None:
        metadata['names'] = json.dumps(names)
    write_safetensors(args.output, state, metadata)
    print(f'{args.output}: {len(state)} tensors, {nc} classes'
          f'{", names and model yaml" if names and "model_yaml" in metadata else ""} from {args.checkpoint}')


if __name__ == '__main__':
    main()
