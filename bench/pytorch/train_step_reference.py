#!/usr/bin/env python3
"""The reference's training step on PyTorch, timed like bench/train_step, for side-by-side ratios.

Runs forward, the reference's ComputeLoss, backward, gradient clipping at norm 10 and its SGD
(smart_optimizer groups) on one resident random batch (u8 images, 4 boxes per image), as
`train_step --device cpu` does, and prints one JSON line per configuration with the same keys. With --forward-only it times
inference instead, as `train_step --forward-only` does.

    /usr/bin/python3 bench/pytorch/train_step_reference.py --yolov5 /tmp/yolov5 \\
        --model yolov5n --img-size 320 --batch-size 16 --iters 5 --warmup 1 --threads 2

--yolov5 is a checkout of ultralytics/yolov5 v7.0 kept outside this repository (it is imported,
never copied). Needs Debian's python3-torch, python3-torchvision, python3-opencv, python3-pandas,
python3-matplotlib, python3-seaborn, python3-yaml, python3-tqdm, python3-psutil.
"""
import argparse
import json
import resource
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--yolov5", required=True, help="path to the reference's source (v7.0)")
    p.add_argument("--model", default="yolov5n")
    p.add_argument("--img-size", type=int, default=320)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format, as Kestrel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forward-only", action="store_true",
                   help="inference as the reference's val.py runs it: fused model, eval, no_grad")
    a = p.parse_args()
    sys.path.insert(0, a.yolov5)
    import torch
    from models.yolo import Model
    from utils.loss import ComputeLoss
    from utils.torch_utils import smart_optimizer
    from utils.general import check_yaml

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Model(check_yaml(f"{a.model}.yaml"), ch=3, nc=80)
    hyp = dict(lr0=0.01, momentum=0.937, weight_decay=0.0005 * a.batch_size / 64, box=0.05 * 3 / 3,
               cls=0.5 * 80 / 80 * 3 / 3, obj=1.0 * (a.img_size / 640) ** 2 * 3 / 3, cls_pw=1.0,
               obj_pw=1.0, fl_gamma=0.0, anchor_t=4.0, label_smoothing=0.0)
    model.hyp = hyp
    model.train()
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    compute_loss = ComputeLoss(model)

    g = torch.Generator().manual_seed(a.seed)
    images = torch.randint(0, 256, (a.batch_size, 3, a.img_size, a.img_size), dtype=torch.uint8, generator=g)
    rows = []
    for i in range(a.batch_size):
        for _ in range(4):
            w, h = (0.05 + 0.35 * torch.rand(2, generator=g)).tolist()
            x = w / 2 + (1 - w) * torch.rand(1, generator=g).item()
            y = h / 2 + (1 - h) * torch.rand(1, generator=g).item()
            rows.append([i, torch.randint(0, 80, (1,), generator=g).item(), x, y, w, h])
    targets = torch.tensor(rows, dtype=torch.float32)

    def step():
        x = images.float() / 255
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        pred = model(x)
        loss, items = compute_loss(pred, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        optimizer.step()
        optimizer.zero_grad()
        return float(items.sum())

    if a.forward_only:
        model = model.fuse().eval()

        def step():
            with torch.no_grad():
                x = images.float() / 255
                if a.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                return float(model(x)[0].numel())

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        loss = step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"bench": "train_step_reference", "mode": "inference" if a.forward_only else "train",
                      "model": a.model, "img_size": a.img_size,
                      "batch": a.batch_size, "threads": a.threads, "channels_last": a.channels_last,
                      "iters": a.iters, "warmup": a.warmup,
                      "images_per_s": round(a.batch_size * a.iters / seconds, 3),
                      "ms_per_step": round(1e3 * seconds / a.iters, 3),
                      "peak_mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "loss": loss, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
