#!/usr/bin/env python3
"""Converts an ultralytics YOLOv5 (v7.0) checkpoint (.pt) into Kestrel weights (.safetensors).

The names stay those of the reference's state_dict (model.0.conv.weight, ...), convolution weights
stay OIHW, the anchors stay in stride units: exactly what `kestrel model --weights` and
`kestrel train --weights` read.

Optional tool: it needs PyTorch and the reference's source tree (a checkpoint pickles the
reference's classes, so they must be importable); nothing in Kestrel's build or tests needs it.

    python3 scripts/convert_ultralytics.py yolov5s.pt yolov5s.safetensors --yolov5 ~/src/yolov5
"""
import argparse
import json
import os
import struct
import sys

DTYPES = {'torch.float32': 'F32', 'torch.float16': 'F16', 'torch.bfloat16': 'BF16',
          'torch.float64': 'F64', 'torch.int64': 'I64', 'torch.int32': 'I32', 'torch.uint8': 'U8'}


def write_safetensors(path, tensors, metadata):
    import torch
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        dtype = DTYPES.get(str(t.dtype))
        if dtype is None:
            sys.exit(f'{name}: dtype {t.dtype} has no safetensors equivalent here')
        data = t.view(-1).view(dtype=torch.uint8).numpy().tobytes() if t.numel() else b''
        header[name] = {'dtype': dtype, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header['__metadata__'] = metadata
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path + '.tmp', 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + '.tmp', path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('checkpoint', help='reference checkpoint, e.g. yolov5s.pt')
    ap.add_argument('output', help='safetensors file to write')
    ap.add_argument('--yolov5', help='path of the reference source tree (to unpickle its classes)')
    ap.add_argument('--half', action='store_true', help='store floating-point tensors as float16')
    args = ap.parse_args()
    if args.yolov5:
        sys.path.insert(0, args.yolov5)
    try:
        import torch
    except ImportError:
        sys.exit('PyTorch is needed to read a .pt checkpoint: pip install torch')
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
    nc = getattr(model, 'nc', None) or getattr(model, 'yaml', {}).get('nc')
    metadata = {'source': args.checkpoint, 'format': 'kestrel-yolov5'}
    if nc is not None:
        metadata['nc'] = str(nc)
    write_safetensors(args.output, state, metadata)
    print(f'{args.output}: {len(state)} tensors')


if __name__ == '__main__':
    main()
