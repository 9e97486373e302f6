#!/usr/bin/env python3
"""Start-up at COCO's scale, Kestrel against the reference, in one sitting (issue 40, part 2).

    bench/yolo/data/compare_startup.py --yolov5 /tmp/yolov5 --python /opt/kestrel-bench/bin/python \
        [--images 118287] [--val 5000] [--source ../shared/datasets/coco128] [--set DIR] \
        [--model yolov5n] [--img 640] [--batch 16] [--workers 8] [--threads 2] [--rounds 3] \
        [--out FILE.jsonl]

Makes (or reuses) a set of --images training images hard-linked from --source
(make_coco_sized.py), then per round: Kestrel cold, the reference cold, Kestrel warm, the reference
warm. Cold: the tool's own label cache deleted first (Kestrel's *.kestrel.cache, the reference's
*.cache), so its scan checks every image and label; warm: the cache the cold run wrote is read.
Each run goes through startup.py (a pseudo-terminal; stopped at the first training step) and
gives the time to the first step, to the end of the train split's scan, to "Starting training",
and the peak RSS. Both tools run with --noplots (the reference's label plots at this size take
minutes and are not start-up) and the same OMP_NUM_THREADS. The images are hard links to a few
files, so they are in the page cache: "cold" means no label cache, not a cold disk.
Prints one JSON line per run and a summary line of medians and ratios; --out appends them."""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", "..", ".."))


def run(command, cwd, threads, timeout):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, os.path.join(here, "startup.py"), "--timeout", str(timeout), "--"]
                         + command, cwd=cwd, env=env, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"compare_startup: no result from {' '.join(command)}:\n{out.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if result["first_step_s"] is None:
        sys.exit(f"compare_startup: {command[0]} reached no training step ({result['stopped']})")
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--yolov5", required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--kestrel", default=os.environ.get("KESTREL", os.path.join(root, "build", "kestrel")))
    p.add_argument("--source", default=os.path.join(root, "..", "shared", "datasets", "coco128"))
    p.add_argument("--set", default="", help="folder of the linked set (default: /tmp/kestrel_coco<N>)")
    p.add_argument("--images", type=int, default=118287)
    p.add_argument("--val", type=int, default=5000)
    p.add_argument("--model", default="yolov5n")
    p.add_argument("--img", type=int, default=640)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default="")
    a = p.parse_args()

    folder = a.set or f"/tmp/kestrel_coco{a.images}"
    subprocess.run([sys.executable, os.path.join(here, "make_coco_sized.py"), "--source", a.source,
                    "--out", folder, "--images", str(a.images), "--val", str(a.val)], check=True)
    data = os.path.join(os.path.abspath(folder), "data.yaml")
    labels = os.path.join(os.path.abspath(folder), "labels")
    runs = os.path.join(os.path.abspath(folder), "runs")
    common = ["--data", data, "--weights", "", "--cfg", a.model + ".yaml", "--img", str(a.img), "--batch",
              str(a.batch), "--epochs", "1", "--workers", str(a.workers), "--noplots", "--project", runs]
    tools = {
        "kestrel": ([a.kestrel, "train"] + common + ["--name", "kestrel"], root, "*.kestrel.cache"),
        "reference": ([a.python, os.path.join(root, "bench", "epoch", "run_reference.py")] + common
                      + ["--name", "reference"], a.yolov5, "*[0-9].cache"),
    }
    lines, table = [], {}
    for r in range(a.rounds):
        for mode in ("cold", "warm"):
            for tool, (command, cwd, cache) in tools.items():
                if mode == "cold":
                    for f in glob.glob(os.path.join(labels, cache)):
                        os.remove(f)
                result = run(command, cwd, a.threads, a.timeout)
                result.update(bench="startup", tool=tool, mode=mode, round=r, images=a.images,
                              model=a.model, img=a.img, threads=a.threads)
                result.pop("command", None)
                print(json.dumps(result), flush=True)
                lines.append(result)
                table.setdefault((tool, mode), []).append(result)
    summary = {"bench": "startup_summary", "images": a.images, "model": a.model, "img": a.img,
               "threads": a.threads, "rounds": a.rounds}
    for mode in ("cold", "warm"):
        for key in ("first_step_s", "scan_end_s", "training_starts_s", "peak_rss_mb"):
            for tool in tools:
                summary[f"{tool}_{mode}_{key}"] = statistics.median(x[key] for x in table[(tool, mode)])
        summary[f"{mode}_first_step_speedup"] = round(
            summary[f"reference_{mode}_first_step_s"] / summary[f"kestrel_{mode}_first_step_s"], 2)
    print(json.dumps(summary), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            for line in lines + [summary]:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
