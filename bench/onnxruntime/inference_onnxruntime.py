#!/usr/bin/env python3
"""ONNX Runtime (CPU) inference of `kestrel export`'s ONNX, timed like `train_step --forward-only`.

The CPU inference anchor of docs/history/performance.md: one resident random u8 batch, converted to float
in [0, 1] inside the timed loop (as train_step and the reference's step do), `warmup` untimed
runs, then `iters` timed runs; one JSON line with the keys train_step_reference.py prints.

    /opt/kestrel-bench/bin/python bench/onnxruntime/inference_onnxruntime.py \\
        --onnx /tmp/anchors/yolov5s_640.onnx --iters 10 --warmup 2 --threads 2

The input shape is read from the graph (export with --img-size S --batch-size B); a graph
exported with --dynamic takes it from --img-size and --batch-size. Threads: intra_op_num_threads
as given, inter_op 1, sequential execution, full graph optimisation (ONNX Runtime's defaults
for a deployed model, with the thread count pinned so the rows compare at equal cores).
Needs onnxruntime and numpy (scripts/install-bench-venv.sh).
"""
import argparse
import json
import os
import resource
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--onnx", required=True, help="a model written by `kestrel export`")
    p.add_argument("--model", default="", help="name for the JSON line (default: from the file name)")
    p.add_argument("--img-size", type=int, default=640, help="only for a graph with dynamic axes")
    p.add_argument("--batch-size", type=int, default=1, help="only for a graph with dynamic axes")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def input_shape(session, a):
    inputs = session.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        sys.exit(f"inference_onnxruntime: {a.onnx} has inputs {[(i.name, i.shape) for i in inputs]}; "
                 "expected one (batch, 3, height, width) input as `kestrel export` writes")
    batch, channels, height, width = inputs[0].shape
    fixed = lambda dim, default: dim if isinstance(dim, int) else default  # noqa: E731
    return inputs[0].name, (fixed(batch, a.batch_size), fixed(channels, 3),
                            fixed(height, a.img_size), fixed(width, a.img_size))


def main():
    a = parse_args()
    if not os.path.isfile(a.onnx):
        sys.exit(f"inference_onnxruntime: {a.onnx} not found; write it with "
                 "`kestrel export --weights W.pt --img-size S`")
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = a.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(a.onnx, options, providers=["CPUExecutionProvider"])
    name, shape = input_shape(session, a)
    images = np.random.default_rng(a.seed).integers(0, 256, size=shape, dtype=np.uint8)

    def step():
        return session.run(None, {name: images.astype(np.float32) / np.float32(255)})[0]

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        out = step()
    seconds = time.perf_counter() - t0
    model = a.model or os.path.splitext(os.path.basename(a.onnx))[0]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"bench": "inference_onnxruntime", "mode": "inference", "model": model,
                      "img_size": shape[2], "batch": shape[0], "device": "cpu", "amp": "off",
                      "threads": a.threads, "iters": a.iters, "warmup": a.warmup,
                      "images_per_s": round(shape[0] * a.iters / seconds, 3),
                      "ms_per_step": round(1e3 * seconds / a.iters, 3),
                      "peak_mem_mb": round(peak_mb, 1), "peak_mem_kind": "process_max_rss",
                      "outputs": list(out.shape), "onnxruntime": ort.__version__}))


if __name__ == "__main__":
    main()
