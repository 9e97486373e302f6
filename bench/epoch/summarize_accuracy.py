#!/usr/bin/env python3
"""One JSON line for a training run's results.csv: the last epoch's training losses and mAP50
(best, last, and the mean of the last ten epochs, steadier than either at coco128's scale).

    python3 bench/epoch/summarize_accuracy.py --amp bf16 --seed 0 runs/train/exp/results.csv
"""
import argparse
import csv
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amp", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("results")
    a = ap.parse_args()
    with open(a.results) as f:
        rows = [[c.strip() for c in r] for r in csv.reader(f)]
    head, body = rows[0], rows[1:]
    col = {name: head.index(name) for name in ("train/box_loss", "train/obj_loss", "train/cls_loss",
                                                "metrics/mAP_0.5", "metrics/mAP_0.5:0.95")}
    map50 = [float(r[col["metrics/mAP_0.5"]]) for r in body]
    last = body[-1]
    tail = map50[-10:]
    print(json.dumps({
        "bench": "bf16_accuracy", "amp": a.amp, "seed": a.seed, "epochs": len(body),
        "box_loss": float(last[col["train/box_loss"]]), "obj_loss": float(last[col["train/obj_loss"]]),
        "cls_loss": float(last[col["train/cls_loss"]]),
        "map50_best": max(map50), "map50_best_epoch": map50.index(max(map50)),
        "map50_last": map50[-1], "map50_last10_mean": round(sum(tail) / len(tail), 6),
        "map50_95_last": float(last[col["metrics/mAP_0.5:0.95"]]),
    }))


if __name__ == "__main__":
    main()
