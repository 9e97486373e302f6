#!/usr/bin/env python3
"""The reference's classifier training step on PyTorch, timed like `train_step --task classify`, for
side-by-side ratios.

classify/train.py's step on one resident random batch: ClassificationModel(model=DetectionModel(
<model>.yaml), nc=1000, cutoff=10) in training mode, smartCrossEntropyLoss(label_smoothing=0.1),
backward, clip_grad_norm_(max_norm=10), smart_optimizer(model, 'Adam', 0.001, 0.9, 5e-5), zero_grad
and ModelEMA.update; float32 on the CPU (the reference autocasts on CUDA only). Prints one JSON
line with the same keys as train_step.

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \\
        bench/pytorch/classify_step_reference.py --yolov5 /tmp/yolov5 --model yolov5s \\
        --img-size 224 --batch-size 64 --iters 3 --warmup 1 --threads 2

--yolov5 is a checkout of ultralytics/yolov5 v7.0 kept outside this repository (imported, never
copied); reference_shims.py lets it import on PyTorch 2.x and offline.
"""
import argparse
import json
import resource
import time

import reference_shims


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--yolov5", required=True, help="path to the reference's source (v7.0)")
    p.add_argument("--model", default="yolov5s")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forward-only", action="store_true", help="inference: fused model, eval, no_grad")
    return p.parse_args()


def main():
    a = parse_args()
    reference_shims.apply(a.yolov5)
    import torch
    from models.yolo import ClassificationModel, DetectionModel
    from utils.general import check_yaml
    from utils.torch_utils import ModelEMA, smart_optimizer, smartCrossEntropyLoss

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = ClassificationModel(model=DetectionModel(check_yaml(f"{a.model}.yaml")), nc=1000, cutoff=10)
    model.train()
    optimizer = smart_optimizer(model, "Adam", 0.001, momentum=0.9, decay=5e-5)
    ema = ModelEMA(model)
    criterion = smartCrossEntropyLoss(label_smoothing=0.1)
    g = torch.Generator().manual_seed(a.seed)
    images = torch.randn((a.batch_size, 3, a.img_size, a.img_size), generator=g)
    labels = torch.randint(0, 1000, (a.batch_size,), generator=g)

    def step():
        loss = criterion(model(images), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        optimizer.step()
        optimizer.zero_grad()
        ema.update(model)
        return loss

    if a.forward_only:
        model = model.fuse().eval()

        def step():
            with torch.no_grad():
                return model(images)

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        out = step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"bench": "train_step_reference", "task": "classify",
                      "mode": "inference" if a.forward_only else "train", "model": a.model,
                      "img_size": a.img_size, "batch": a.batch_size, "device": "cpu", "amp": "off",
                      "threads": a.threads, "iters": a.iters, "warmup": a.warmup,
                      "images_per_s": round(a.batch_size * a.iters / seconds, 3),
                      "ms_per_step": round(1e3 * seconds / a.iters, 3),
                      "peak_mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "peak_mem_kind": "process_max_rss",
                      "loss": float(out.numel()) if a.forward_only else float(out),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
