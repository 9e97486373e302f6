"""Reading and writing safetensors files with PyTorch tensors, for the converters beside this file.

The format: an 8-byte little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range (plus an optional "__metadata__" map of strings), then the raw
little-endian tensor bytes. Written to a temporary name and renamed, as Kestrel writes its files.
"""
import json
import os
import struct

TO_SAFETENSORS = {'torch.float32': 'F32', 'torch.float16': 'F16', 'torch.bfloat16': 'BF16',
                  'torch.float64': 'F64', 'torch.int64': 'I64', 'torch.int32': 'I32', 'torch.uint8': 'U8'}


def torch_dtype(name, path):
    import torch
    dtypes = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'F64': torch.float64,
              'I64': torch.int64, 'I32': torch.int32, 'U8': torch.uint8}
    if name not in dtypes:
        raise SystemExit(f'{path}: dtype {name} is not one Kestrel writes')
    return dtypes[name]


def write_safetensors(path, tensors, metadata):
    import torch
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        dtype = TO_SAFETENSORS.get(str(t.dtype))
        if dtype is None:
            raise SystemExit(f'{name}: dtype {t.dtype} has no safetensors equivalent here')
        data = t.view(-1).view(dtype=torch.uint8).numpy().tobytes() if t.numel() else b''
        header[name] = {'dtype': dtype, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header['__metadata__'] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path + '.tmp', 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + '.tmp', path)


def read_safetensors(path):
    """Returns ({name: tensor}, metadata), refusing a damaged file with its name."""
    import torch
    with open(path, 'rb') as f:
        raw = f.read()
    if len(raw) < 8:
        raise SystemExit(f'{path}: too short for a safetensors file')
    (n,) = struct.unpack('<Q', raw[:8])
    if 8 + n > len(raw):
        raise SystemExit(f'{path}: header length {n} runs past the end of the file; is it a safetensors file?')
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise SystemExit(f'{path}: header is not JSON ({e}); is it a safetensors file?')
    metadata = header.pop('__metadata__', {}) or {}
    data = raw[8 + n:]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry['data_offsets']
        if not 0 <= begin <= end <= len(data):
            raise SystemExit(f'{path}: tensor {name} lies outside the file; the file is damaged')
        dtype = torch_dtype(entry['dtype'], path)
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(entry['shape'])
    return tensors, metadata
