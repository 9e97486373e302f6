#!/usr/bin/env python3
"""The reference's segmentation training step on PyTorch, timed like `train_step --task segment`,
for side-by-side ratios.

segment/train.py's step on one resident random batch: SegmentationModel(models/segment/<model>.yaml,
nc=80) in training mode with hyp.scratch-low scaled to the levels, classes and image size (as
train.py scales it), utils/segment/loss.py's ComputeLoss(model, overlap=True), forward, loss,
backward, clip_grad_norm_(max_norm=10), smart_optimizer(model, 'SGD', ...) step and zero_grad;
float32 on the CPU. The batch is the one train_step builds: u8 images, 4 random boxes per image,
and the overlap masks the loader makes at img/4 (polygons2masks_overlap): per image, the targets in
decreasing area, each box's pixels holding its 1-based index in the image, later (smaller) boxes
painted over earlier ones; the step reads them as segment/train.py does (masks.float()). Prints
one JSON line with the same keys as train_step.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \\
        bench/pytorch/segment_step_reference.py --yolov5 /tmp/yolov5 --model yolov5s-seg \\
        --img-size 320 --batch-size 16 --iters 3 --warmup 1 --threads 2

--yolov5 is a checkout of ultralytics/yolov5 v7.0 kept outside this repository (imported, never
copied); reference_shims.py lets it import on PyTorch 2.x and offline.
"""
import argparse
import json
import os
import resource
import time

import reference_shims


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--yolov5", required=True, help="path to the reference's source (v7.0)")
    p.add_argument("--model", default="yolov5s-seg", help="a name under models/segment/ or a yaml path")
    p.add_argument("--img-size", type=int, default=320)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def random_batch(torch, a):
    """train_step's batch: images, targets (image, class, x, y, w, h) and overlap masks at img/4."""
    g = torch.Generator().manual_seed(a.seed)
    images = torch.randint(0, 256, (a.batch_size, 3, a.img_size, a.img_size), dtype=torch.uint8, generator=g)
    m = a.img_size // 4
    masks = torch.zeros((a.batch_size, m, m), dtype=torch.uint8)
    rows = []
    for i in range(a.batch_size):
        boxes = []
        for _ in range(4):
            w, h = (0.05 + 0.35 * torch.rand(2, generator=g)).tolist()
            x = w / 2 + (1 - w) * torch.rand(1, generator=g).item()
            y = h / 2 + (1 - h) * torch.rand(1, generator=g).item()
            boxes.append([i, torch.randint(0, 80, (1,), generator=g).item(), x, y, w, h])
        boxes.sort(key=lambda r: -r[4] * r[5])  # polygons2masks_overlap's order: larger first
        for k, (_, _, x, y, w, h) in enumerate(boxes):
            def edge(v):
                return min(max(int(round(v * m)), 0), m)
            masks[i, edge(y - h / 2):edge(y + h / 2), edge(x - w / 2):edge(x + w / 2)] = k + 1
        rows += boxes
    return images, torch.tensor(rows, dtype=torch.float32), masks


def main():
    a = parse_args()
    reference_shims.apply(a.yolov5)
    import torch
    from models.yolo import SegmentationModel
    from utils.segment.loss import ComputeLoss
    from utils.torch_utils import smart_optimizer

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = a.model if os.path.exists(a.model) else os.path.join(a.yolov5, "models", "segment", f"{a.model}.yaml")
    model = SegmentationModel(cfg, ch=3, nc=80)
    nl = model.model[-1].nl
    # hyp.scratch-low, scaled as segment/train.py scales it.
    hyp = dict(lr0=0.01, momentum=0.937, weight_decay=0.0005 * a.batch_size / 64, box=0.05 * 3 / nl,
               cls=0.5 * 80 / 80 * 3 / nl, obj=1.0 * (a.img_size / 640) ** 2 * 3 / nl, cls_pw=1.0,
               obj_pw=1.0, fl_gamma=0.0, anchor_t=4.0, label_smoothing=0.0)
    model.hyp = hyp
    model.train()
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    compute_loss = ComputeLoss(model, overlap=True)
    images, targets, masks = random_batch(torch, a)

    def step():
        x = images.float() / 255
        pred = model(x)
        loss, items = compute_loss(pred, targets, masks=masks.float())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        optimizer.step()
        optimizer.zero_grad()
        return items

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        out = step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"bench": "train_step_reference", "task": "segment", "mode": "train", "model": a.model,
                      "img_size": a.img_size, "batch": a.batch_size, "device": "cpu", "amp": "off",
                      "threads": a.threads, "iters": a.iters, "warmup": a.warmup,
                      "images_per_s": round(a.batch_size * a.iters / seconds, 3),
                      "ms_per_step": round(1e3 * seconds / a.iters, 3),
                      "peak_mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "peak_mem_kind": "process_max_rss", "loss": float(out.sum()),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
