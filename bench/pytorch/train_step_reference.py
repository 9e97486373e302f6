#!/usr/bin/env python3
"""The reference's training step on PyTorch, timed like bench/yolo/train, for side-by-side ratios.

Runs forward, the reference's ComputeLoss, backward, gradient clipping at norm 10 and its SGD
(smart_optimizer groups) on one resident random batch (u8 images, 4 boxes per image), as
`train_step` does without --data, and prints one JSON line per configuration with the same keys.
With --forward-only it times inference instead, as `train_step --forward-only` does.

    /usr/bin/python3 bench/pytorch/train_step_reference.py --yolov5 /tmp/yolov5 \\
        --model yolov5n --img-size 320 --batch-size 16 --iters 5 --warmup 1 --threads 2

On a GPU (--device cuda) the step runs as train.py runs it under --amp fp16: autocast around
forward and loss, a GradScaler around backward (unscale before clipping, then step and update).
--amp bf16 autocasts to bfloat16 without a scaler (also on the CPU). --deterministic sets what
train.py's init_seeds(deterministic=True) sets (deterministic algorithms and cuDNN, cuBLAS
workspace), so the figure is the step train.py really runs; without it PyTorch picks its fastest
kernels, and --cudnn-benchmark lets cuDNN time them first. Timing waits for the device at the
start and end only, as the loss values are read once at the end.

--yolov5 is a checkout of ultralytics/yolov5 v7.0 kept outside this repository (it is imported,
never copied). Needs PyTorch, torchvision, OpenCV, pandas, matplotlib, seaborn, PyYAML, tqdm and
psutil (Debian's python3-* packages, or the GPU machine's own Python). For PyPI's newest PyTorch
(2.15), scripts/install-bench-venv.sh makes /opt/kestrel-bench with all of them:

    LD_LIBRARY_PATH=/usr/local/cuda/lib64 /opt/kestrel-bench/bin/python \
        bench/pytorch/train_step_reference.py --yolov5 /tmp/yolov5 --amp bf16 ...

The run-time shims of reference_shims.py let v7.0 import on PyTorch 2.x and numpy 2.x.
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
    p.add_argument("--model", default="yolov5n")
    p.add_argument("--img-size", type=int, default=320)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--amp", default="off", choices=["off", "fp16", "bf16"])
    p.add_argument("--deterministic", action="store_true", help="as train.py's init_seeds(deterministic=True)")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format, as Kestrel")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forward-only", action="store_true",
                   help="inference as the reference's val.py runs it: fused model, eval, no_grad")
    return p.parse_args()


def random_batch(torch, a):
    g = torch.Generator().manual_seed(a.seed)
    images = torch.randint(0, 256, (a.batch_size, 3, a.img_size, a.img_size), dtype=torch.uint8, generator=g)
    rows = []
    for i in range(a.batch_size):
        for _ in range(4):
            w, h = (0.05 + 0.35 * torch.rand(2, generator=g)).tolist()
            x = w / 2 + (1 - w) * torch.rand(1, generator=g).item()
            y = h / 2 + (1 - h) * torch.rand(1, generator=g).item()
            rows.append([i, torch.randint(0, 80, (1,), generator=g).item(), x, y, w, h])
    return images, torch.tensor(rows, dtype=torch.float32)


def main():
    a = parse_args()
    reference_shims.apply(a.yolov5)
    import torch
    from models.yolo import Model
    from utils.loss import ComputeLoss
    from utils.torch_utils import smart_optimizer
    from utils.general import check_yaml

    if a.deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    cuda = a.device.startswith("cuda")
    device = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Model(check_yaml(f"{a.model}.yaml"), ch=3, nc=80).to(device)
    hyp = dict(lr0=0.01, momentum=0.937, weight_decay=0.0005 * a.batch_size / 64, box=0.05 * 3 / 3,
               cls=0.5 * 80 / 80 * 3 / 3, obj=1.0 * (a.img_size / 640) ** 2 * 3 / 3, cls_pw=1.0,
               obj_pw=1.0, fl_gamma=0.0, anchor_t=4.0, label_smoothing=0.0)
    model.hyp = hyp
    model.train()
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    compute_loss = ComputeLoss(model)
    autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    scaler = torch.amp.GradScaler("cuda", enabled=cuda and a.amp == "fp16") if cuda else None

    images, targets = random_batch(torch, a)
    images, targets = images.to(device), targets.to(device)

    def autocast():
        return torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)

    def step():
        x = images.float() / 255
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast():
            pred = model(x)
            loss, items = compute_loss(pred, targets)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
        optimizer.zero_grad()
        return items

    if a.forward_only:
        model = model.fuse().eval()

        def step():
            with torch.no_grad(), autocast():
                x = images.float() / 255
                if a.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                return model(x)[0]

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for _ in range(a.iters):
        out = step()
    sync()
    seconds = time.perf_counter() - t0
    loss = float(out.numel()) if a.forward_only else float(out.sum())
    if cuda:
        peak_mb, peak_kind = torch.cuda.max_memory_allocated(device) / 2**20, "torch_allocated"
        reserved_mb = torch.cuda.max_memory_reserved(device) / 2**20
    else:
        peak_mb, peak_kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_max_rss"
        reserved_mb = peak_mb
    print(json.dumps({"bench": "train_step_reference", "mode": "inference" if a.forward_only else "train",
                      "model": a.model, "img_size": a.img_size, "batch": a.batch_size,
                      "device": a.device, "amp": a.amp, "deterministic": a.deterministic,
                      "cudnn_benchmark": a.cudnn_benchmark, "threads": a.threads,
                      "channels_last": a.channels_last, "iters": a.iters, "warmup": a.warmup,
                      "images_per_s": round(a.batch_size * a.iters / seconds, 3),
                      "ms_per_step": round(1e3 * seconds / a.iters, 3),
                      "peak_mem_mb": round(peak_mb, 1), "peak_mem_kind": peak_kind,
                      "peak_reserved_mb": round(reserved_mb, 1),
                      "loss": loss, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
