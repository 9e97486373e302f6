"""Summaries of step files, shared by the step-parity fixtures (classify_reference.py and
segment_reference.py `summarize`): a whole training step's tensors are megabytes, so the repository
keeps, per tensor, its sum, norm and largest magnitude and 64 of its values spread from first to
last, and the C++ step-parity tests (tests/yolo/train/*_step_parity_test.cpp) compare by those.
"""
import os
from pathlib import Path

import torch

from safetensors_io import read_safetensors, write_safetensors


def summary_positions(numel, count=64):
    """The elements a summary keeps: every one of a small tensor, else `count` spread evenly from the
    first to the last (the step-parity tests pick the same)."""
    if numel <= count:
        return list(range(numel))
    return [k * (numel - 1) // (count - 1) for k in range(count)]


def summarize(full, out, keep):
    """A small stand-in for a step file: the tensors named in `keep` as they are, and for every other
    tensor NAME `NAME.stats` (float64 sum, Euclidean norm and largest magnitude) and `NAME.samples`
    (float32 values at summary_positions)."""
    tensors, metadata = read_safetensors(full)
    kept = {}
    for name, t in tensors.items():
        if name in keep:
            kept[name] = t
            continue
        flat = t.reshape(-1).double()
        kept[f'{name}.stats'] = torch.tensor([flat.sum().item(), flat.norm().item(), flat.abs().max().item()],
                                             dtype=torch.float64)
        kept[f'{name}.samples'] = flat[summary_positions(flat.numel())].float()
    metadata = dict(metadata, summary=f'of {Path(full).name}: NAME.stats (sum, norm, max |x|) and NAME.samples')
    write_safetensors(out, kept, metadata)
    print(f'wrote {out}: {len(kept)} tensors, {os.path.getsize(out)} bytes')
