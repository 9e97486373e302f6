#!/usr/bin/env python3
"""The reference's training loader (ultralytics YOLOv5 v7.0 create_dataloader: mosaic at 640,
hyp.scratch-low, batches of 16) on coco128, timed like bench_kernels' LoaderMosaic640 rows: batches/s
after a warm-up, as images/s. Prints one JSON line.

    /usr/bin/python3 bench/yolo/data/reference_loader.py --yolov5 DIR --workers 1 [--cache ram]

DIR is a v7.0 checkout outside this repository. The images are linked (not copied) into a scratch
folder beside a copy of the labels, so the reference's label cache is written there and the shared
dataset is left alone. The run-time shims of bench/pytorch/reference_shims.py let v7.0 import on
newer stacks; nothing of the reference is changed."""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def scratch_dataset(root):
    """images/train2017 linked, labels/train2017 copied, in a fresh temporary folder."""
    dest = tempfile.mkdtemp(prefix="kestrel_ref_loader_")
    os.makedirs(os.path.join(dest, "images"))
    os.makedirs(os.path.join(dest, "labels"))
    os.symlink(os.path.abspath(os.path.join(root, "images", "train2017")),
               os.path.join(dest, "images", "train2017"))
    shutil.copytree(os.path.join(root, "labels", "train2017"), os.path.join(dest, "labels", "train2017"))
    return dest


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yolov5", required=True, help="a checkout of ultralytics/yolov5 v7.0")
    ap.add_argument("--coco128", default=os.path.join(here, "..", "..", "..", "shared", "datasets", "coco128"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cache", choices=["ram", "none"], default="none")
    ap.add_argument("--img-size", type=int, default=640)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=8, help="batches before the clock starts")
    ap.add_argument("--batches", type=int, default=24, help="batches timed")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(here, "..", "pytorch"))
    import reference_shims
    reference_shims.apply(args.yolov5)
    sys.path.insert(0, os.path.abspath(args.yolov5))
    import yaml
    from utils.dataloaders import create_dataloader  # also sets cv2.setNumThreads(0), as in training

    with open(os.path.join(args.yolov5, "data", "hyps", "hyp.scratch-low.yaml")) as f:
        hyp = yaml.safe_load(f)
    dest = scratch_dataset(args.coco128)
    try:
        loader, dataset = create_dataloader(os.path.join(dest, "images", "train2017"), args.img_size,
                                            args.batch_size, 32, hyp=hyp, augment=True,
                                            cache="ram" if args.cache == "ram" else False,
                                            rank=-1, workers=args.workers, shuffle=True)
        assert loader.num_workers == args.workers, f"the reference chose {loader.num_workers} workers"

        def batches():
            while True:
                yield from loader

        it = batches()
        for _ in range(args.warmup):
            next(it)
        images = 0
        start = time.perf_counter()
        for _ in range(args.batches):
            images += next(it)[0].shape[0]
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    print(json.dumps({"name": "reference_loader", "workers": args.workers, "cache": args.cache,
                      "images": images, "seconds": round(seconds, 3),
                      "images_per_s": round(images / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
