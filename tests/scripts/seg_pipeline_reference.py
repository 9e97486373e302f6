"""The reference's LoadImagesAndLabelsAndMasks(augment=False) on a few coco128-seg images, for
tests/yolo/data/seg_pipeline_test.cpp (its recorded fixture: tests/data/seg_pipeline_reference.txt).

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \\
        tests/scripts/seg_pipeline_reference.py [COCO128_SEG_DIR] > tests/data/seg_pipeline_reference.txt

Reads the reference tree at $KESTREL_REFERENCE_DIR or /tmp/yolov5 and coco128-seg at the argument,
$KESTREL_COCO128_SEG or /work/shared/datasets/coco128-seg. The dataset's label cache goes to a
temporary folder. For each case (image size, rect, batch size, pad, mask ratio, overlap) and each
item in the dataset's order it prints the image's shape and checksum (sum over its H x W x 3 RGB
bytes of byte * (i % 65521 + 1), uint64), the shapes for COCO rescaling, the labels (repr of the
float32 values) and per mask plane its shape, the sum of its values and the sum of
value * (y * W + x).
"""
import os
import sys
import tempfile

import numpy as np

REF = os.environ.get('KESTREL_REFERENCE_DIR', '/tmp/yolov5')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', 'bench', 'pytorch'))
import reference_shims  # noqa: E402

reference_shims.apply(REF)
from utils.segment.dataloaders import LoadImagesAndLabelsAndMasks  # noqa: E402

IMAGES = ['000000000009', '000000000025', '000000000030', '000000000034', '000000000036', '000000000042']
# image size, rect, batch size, pad, mask ratio, overlap
CASES = [(320, False, 1, 0.0, 4, True), (320, True, 2, 0.5, 4, True), (256, True, 4, 0.5, 4, False),
         (192, False, 1, 0.0, 1, False)]


def checksum(hwc):
    flat = hwc.reshape(-1).astype(np.uint64)
    weights = (np.arange(flat.size, dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)
    return int((flat * weights).sum(dtype=np.uint64))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get('KESTREL_COCO128_SEG',
                                                                '/work/shared/datasets/coco128-seg')
    with tempfile.TemporaryDirectory() as tmp:
        listing = os.path.join(tmp, 'images.txt')
        with open(listing, 'w') as f:
            for name in IMAGES:
                f.write(os.path.join(os.path.abspath(root), 'images', 'train2017', name + '.jpg') + '\n')
        for size, rect, batch, pad, ratio, overlap in CASES:
            ds = LoadImagesAndLabelsAndMasks(listing, size, batch, augment=False, rect=rect, stride=32, pad=pad,
                                             downsample_ratio=ratio, overlap=overlap)
            print(f'case {size} {int(rect)} {batch} {pad} {ratio} {int(overlap)}')
            for i in range(len(ds)):
                img, labels, path, shapes, masks = ds[i]
                hwc = img.permute(1, 2, 0).contiguous().numpy()
                print(f'item {os.path.basename(path)} {hwc.shape[0]} {hwc.shape[1]} {checksum(hwc)}')
                (h0, w0), ((rh, rw), (pw, ph)) = shapes
                print('shapes', h0, w0, repr(float(rh)), repr(float(rw)), repr(float(pw)), repr(float(ph)))
                for row in labels.numpy().astype(np.float32):
                    print('label', int(row[1]), *(repr(float(v)) for v in row[2:]))
                for m in masks.numpy().astype(np.int64):
                    flat = m.reshape(-1)
                    weighted = int((flat * np.arange(flat.size, dtype=np.int64)).sum())
                    print('mask', m.shape[0], m.shape[1], int(flat.sum()), weighted)


if __name__ == '__main__':
    main()
