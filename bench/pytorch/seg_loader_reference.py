#!/usr/bin/env python3
"""The reference's segmentation training loader (ultralytics YOLOv5 v7.0 LoadImagesAndLabelsAndMasks
with augment=True: 4-image mosaic at 640 with its polygons, hyp.scratch-low, overlap masks at mask
ratio 4, batches of 16) on coco128-seg/train2017, timed like bench_kernels' LoaderMosaicSeg640
rows: batches after a warm-up, as images/s. Prints one JSON line.

    /opt/kestrel-bench/bin/python bench/pytorch/seg_loader_reference.py --yolov5 DIR \
        [--workers 0|1|2] [--cache none|ram]

DIR is a v7.0 checkout outside this repository. --workers 0 runs __getitem__ and the reference's
collate_fn in this process, in Kestrel's row's order (0, 1, 2, ... by epoch; the mosaic's partners
are random either way): one core, the per-worker cost. N >= 1 uses the reference's own
utils/segment/dataloaders.create_dataloader (shuffled) with N worker processes. No image cache by
default, as LoaderMosaicSeg640 (every image decoded each time it is used); --cache ram is the
reference's --cache ram. The images are linked (not copied) into a scratch folder beside a copy of
the labels, so the reference's label cache is written there and the shared dataset is left alone.
The shims of reference_shims.py let v7.0 import on newer stacks; nothing of the reference is
changed."""
import argparse
import json
import os
import random
import shutil
import sys
import time


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yolov5", required=True, help="a checkout of ultralytics/yolov5 v7.0")
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "..", "shared", "datasets", "coco128-seg"),
                    help="a folder with images/train2017 and labels/train2017 (polygon labels)")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--cache", choices=["none", "ram"], default="none")
    ap.add_argument("--img-size", type=int, default=640)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--mask-ratio", type=int, default=4)
    ap.add_argument("--no-overlap", action="store_true", help="one mask per instance (default: overlap masks)")
    ap.add_argument("--warmup", type=int, default=4, help="batches before the clock starts")
    ap.add_argument("--batches", type=int, default=16, help="batches timed")
    args = ap.parse_args()

    sys.path.insert(0, here)
    sys.path.insert(0, os.path.join(here, "..", "yolo", "data"))
    from reference_loader import scratch_dataset  # the detection loader bench's scratch copy
    import reference_shims
    reference_shims.apply(args.yolov5)
    sys.path.insert(0, os.path.abspath(args.yolov5))
    import numpy as np
    import torch
    import yaml
    # Importing the reference's dataloaders sets cv2.setNumThreads(0), as in training.
    from utils.segment.dataloaders import LoadImagesAndLabelsAndMasks, create_dataloader

    torch.set_num_threads(1)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    with open(os.path.join(args.yolov5, "data", "hyps", "hyp.scratch-low.yaml")) as f:
        hyp = yaml.safe_load(f)
    cache = "ram" if args.cache == "ram" else False
    overlap = not args.no_overlap
    dest = scratch_dataset(args.data)
    try:
        path = os.path.join(dest, "images", "train2017")
        if args.workers == 0:
            dataset = LoadImagesAndLabelsAndMasks(path, args.img_size, args.batch_size, augment=True, hyp=hyp,
                                                  cache_images=cache, stride=32,
                                                  downsample_ratio=args.mask_ratio, overlap=overlap)

            def batches():
                while True:  # epochs of sequential batches, the last one short, as Kestrel's SegLoader
                    for start in range(0, len(dataset), args.batch_size):
                        idx = range(start, min(start + args.batch_size, len(dataset)))
                        yield LoadImagesAndLabelsAndMasks.collate_fn([dataset[i] for i in idx])
        else:
            loader, dataset = create_dataloader(path, args.img_size, args.batch_size, 32, hyp=hyp, augment=True,
                                                cache=cache, rank=-1, workers=args.workers, shuffle=True,
                                                mask_downsample_ratio=args.mask_ratio, overlap_mask=overlap)
            assert loader.num_workers == args.workers, f"the reference chose {loader.num_workers} workers"

            def batches():
                while True:
                    yield from loader

        it = batches()
        for _ in range(args.warmup):  # worker start, file cache, first allocations
            next(it)
        images = 0
        start = time.perf_counter()
        for _ in range(args.batches):
            b = next(it)
            images += b[0].shape[0]
        seconds = time.perf_counter() - start
        imgs, masks = b[0], b[4]
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    print(json.dumps({"name": "reference_seg_loader", "workers": args.workers, "cache": args.cache,
                      "img_size": args.img_size, "batch_size": args.batch_size, "mask_ratio": args.mask_ratio,
                      "overlap": overlap, "dataset_images": len(dataset),
                      "last_batch": [list(imgs.shape), list(masks.shape), str(masks.dtype)],
                      "images": images, "seconds": round(seconds, 3),
                      "images_per_s": round(images / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
