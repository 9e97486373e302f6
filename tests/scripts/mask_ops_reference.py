"""The reference's mask arithmetic on fixed inputs, for the numbers recorded in
tests/yolo/eval/mask_ops_test.cpp.

    python mask_ops_reference.py   # with the reference tree at $KESTREL_REFERENCE_DIR or /tmp/yolov5

The inputs come from integer formulas that the C++ test repeats (no random generator to share):
prototypes and coefficients are multiples of 1/32 and 1/16, so every dot product is exact in
float32 whatever order a matmul adds in, and only the sigmoid's last bit can differ. Prints, per
mask, its number of set pixels and the sum of their flat indices (y * w + x); for F.interpolate,
the float64 sum of the outputs in row-major order and the exact bits of a few of them. Every
output has height + width > 128, where torch's CPU takes its generic kernel (image-sized masks
always do); smaller ones take another kernel whose last bits differ.

process_mask and process_mask_upsample are v7.0's (utils/segment/general.py). v7.0 has no
process_mask_native (--retina-masks came after it); "native" below is the later reference's
recipe made of the same pieces: prototypes, sigmoid, the letterbox padding cut off the prototype
grid, upsampled to the original image, then cropped with boxes in the original image's pixels.
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5'))
from utils.segment.general import (crop_mask, masks2segments, process_mask, process_mask_upsample,  # noqa: E402
                                   scale_image)

NM, MH, MW = 32, 16, 24


def prototypes():
    p = torch.empty(NM, MH, MW)
    for c in range(NM):
        for y in range(MH):
            for x in range(MW):
                p[c, y, x] = ((c * 131 + y * 31 + x * 17) % 97 - 48) / 32.0
    return p


def coefficients(n):
    return torch.tensor([[((i * 7 + c * 13 + 5) % 23 - 11) / 16.0 for c in range(NM)] for i in range(n)])


BOXES = [[0, 0, 96, 64], [10.5, 7.25, 57.9, 40.0], [-5, 20, 30.01, 80], [30, 30, 30, 40], [64.2, 2.6, 95.1, 31.7]]
NATIVE_BOXES = [[3.3, 4.1, 60.7, 40.2], [0, 0, 97, 50], [70.5, 20.5, 97, 50]]


def report(name, masks):
    for i, m in enumerate(masks):
        flat = m.reshape(-1)
        on = torch.nonzero(flat > 0).reshape(-1)
        print(f'{name} {i} {tuple(m.shape)} {int(on.numel())} {int(on.sum())}')


def native(protos, coef, boxes, shape):
    masks = (coef @ protos.view(NM, -1)).sigmoid().view(-1, MH, MW)
    gain = min(MH / shape[0], MW / shape[1])
    pad_w, pad_h = (MW - shape[1] * gain) / 2, (MH - shape[0] * gain) / 2
    masks = masks[:, int(pad_h):int(MH - pad_h), int(pad_w):int(MW - pad_w)]
    masks = F.interpolate(masks[None], shape, mode='bilinear', align_corners=False)[0]
    return crop_mask(masks, boxes).gt_(0.5)


def ramp(n, h, w):
    k = torch.arange(n * h * w, dtype=torch.int64)
    return ((k * 37) % 101).to(torch.float32).div(torch.tensor(101.0)).view(n, h, w)


def pattern(n, h, w):
    """uint8 (n, h, w): pixel (y, x) of mask i set when (7y + 3x + 5i) % 11 < 4."""
    return torch.tensor([[[int((7 * y + 3 * x + 5 * i) % 11 < 4) for x in range(w)] for y in range(h)]
                         for i in range(n)], dtype=torch.uint8)


def segment_masks():
    m = torch.zeros(3, 10, 12, dtype=torch.uint8)
    m[0, 3:6, 2:7] = 1
    m[1, 0:2, 0:2] = 1
    for y in range(4, 10):
        m[1, y, 5:5 + y - 3] = 1
    return m


def bits(v):
    return struct.unpack('<I', struct.pack('<f', v))[0]


def main():
    torch.set_num_threads(1)
    protos = prototypes()
    boxes = torch.tensor(BOXES, dtype=torch.float32)
    coef = coefficients(len(BOXES))
    report('process_mask', process_mask(protos, coef, boxes, (64, 96)))
    report('process_mask_up', process_mask(protos, coef, boxes, (64, 96), upsample=True))
    report('process_mask_upsample', process_mask_upsample(protos, coef, boxes, (64, 96)))
    nboxes = torch.tensor(NATIVE_BOXES, dtype=torch.float32)
    report('process_mask_native', native(protos, coefficients(len(NATIVE_BOXES)), nboxes, (50, 97)))
    x = ramp(2, 9, 11)
    for h, w in [(64, 70), (33, 100), (7, 130), (9, 120)]:
        y = F.interpolate(x[None], (h, w), mode='bilinear', align_corners=False)[0]
        total = 0.0
        for v in y.reshape(-1).tolist():
            total += v
        picks = [y[0, 0, 0], y[1, h // 2, w // 3], y[1, h - 1, w - 1]]
        print(f'interpolate {h} {w} {total!r} ' + ' '.join(f'0x{bits(float(v)):08x}' for v in picks))

    for n in (3, 6):
        masks = pattern(n, 16, 16)
        for name, ratio_pad in (('centred', None), ('ratio_pad', ((1.2, 1.2), (0.5, 2.5)))):
            out = scale_image((16, 16), masks.permute(1, 2, 0).contiguous().numpy(), (10, 13, 3), ratio_pad)
            report(f'scale_image_{name}_{n}', torch.from_numpy(out).permute(2, 0, 1))
    for strategy in ('largest', 'concat'):
        for i, seg in enumerate(masks2segments(segment_masks(), strategy)):
            print(f'masks2segments {strategy} {i} ' + ' '.join(f'{int(x)},{int(y)}' for x, y in seg.tolist()))


if __name__ == '__main__':
    main()
