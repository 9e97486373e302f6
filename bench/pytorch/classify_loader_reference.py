#!/usr/bin/env python3
"""The reference's classification training loader (ultralytics YOLOv5 v7.0 ClassificationDataset
with augment=True at 224, batches of 64) on coco128-cls/train, timed like bench_kernels'
LoaderClassify224 rows: whole shuffled epochs after a warm-up epoch, as images/s. Prints one JSON
line.

    /opt/kestrel-bench/bin/python bench/pytorch/classify_loader_reference.py --yolov5 DIR \
        [--albumentations DIR] [--workers 0|1|2]

DIR is a v7.0 checkout outside this repository. --workers 0 runs __getitem__ and the default
collate in this process (one core: the per-worker cost); N >= 1 uses the reference's own
create_classification_dataloader with N worker processes. The reference augments with
albumentations when it imports (RandomResizedCrop, HorizontalFlip, ColorJitter, Normalize), else
it falls back to the centre crop alone; the JSON line says which path ran. --albumentations puts
a folder holding albumentations 1.3.1 and its dependencies (pip install --target) on the path,
so that the bench environment itself is left alone. The shims of reference_shims.py let v7.0
import on newer stacks; nothing of the reference is changed."""
import argparse
import json
import os
import sys
import time


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yolov5", required=True, help="a checkout of ultralytics/yolov5 v7.0")
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "..", "shared", "datasets", "coco128-cls", "train"))
    ap.add_argument("--albumentations", default="", help="a folder holding albumentations (pip install --target)")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3, help="epochs timed, after one warm-up epoch")
    args = ap.parse_args()

    if args.albumentations:
        sys.path.insert(0, os.path.abspath(args.albumentations))
    sys.path.insert(0, here)
    import reference_shims
    reference_shims.apply(args.yolov5)
    sys.path.insert(0, os.path.abspath(args.yolov5))
    import torch
    from torch.utils.data import default_collate
    from utils.dataloaders import ClassificationDataset, create_classification_dataloader  # cv2.setNumThreads(0)

    torch.set_num_threads(1)
    if args.workers == 0:
        dataset = ClassificationDataset(root=args.data, augment=True, imgsz=args.img_size)
        generator = torch.Generator().manual_seed(0)

        def epoch():
            order = torch.randperm(len(dataset), generator=generator).tolist()
            images = 0
            for start in range(0, len(order), args.batch_size):
                batch = default_collate([dataset[i] for i in order[start:start + args.batch_size]])
                images += batch[0].shape[0]
            return images
    else:
        loader = create_classification_dataloader(args.data, args.img_size, args.batch_size, augment=True,
                                                  rank=-1, workers=args.workers)
        assert loader.num_workers == args.workers, f"the reference chose {loader.num_workers} workers"
        dataset = loader.dataset

        def epoch():
            return sum(images.shape[0] for images, _ in loader)

    epoch()  # warm-up: worker start, file cache
    images = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        images += epoch()
    seconds = time.perf_counter() - start
    path = "albumentations" if dataset.album_transforms is not None else "torchvision centre crop (no albumentations)"
    print(json.dumps({"name": "reference_classify_loader", "workers": args.workers, "transforms": path,
                      "img_size": args.img_size, "batch_size": args.batch_size, "images": images,
                      "seconds": round(seconds, 3), "images_per_s": round(images / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
