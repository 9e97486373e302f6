"""pycocotools' RLE of binary masks, for tests/io/rle_test.

    python rle_reference.py MASK.txt [MASK.txt ...]

Each file holds one mask: one line per row, one character '0' or '1' per pixel. Prints one line
per file: the compressed counts exactly as the reference's save_one_json stores them
(encode(np.asarray(m[:, :, None], order='F', dtype='uint8'))[0]['counts'].decode('utf-8')),
then the size (h w), area() and toBbox() (x y w h, as repr() writes them). Needs pycocotools.
"""
import sys

import numpy as np
from pycocotools import mask as mask_utils


def read_mask(path):
    with open(path) as f:
        rows = [line.strip() for line in f if line.strip()]
    return np.array([[int(c) for c in row] for row in rows], dtype=np.uint8).reshape(len(rows), -1)


def main():
    if len(sys.argv) < 2:
        sys.exit('usage: rle_reference.py MASK.txt [MASK.txt ...]')
    for path in sys.argv[1:]:
        m = read_mask(path)
        rle = mask_utils.encode(np.asarray(m[:, :, None], order='F', dtype='uint8'))[0]
        box = ' '.join(repr(float(v)) for v in mask_utils.toBbox(rle))
        print(rle['counts'].decode('utf-8'), rle['size'][0], rle['size'][1], int(mask_utils.area(rle)), box)


if __name__ == '__main__':
    main()
