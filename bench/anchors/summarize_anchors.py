#!/usr/bin/env python3
"""Medians, spreads and Kestrel/anchor ratios from compare_anchors.sh's JSON lines.

    python3 bench/anchors/summarize_anchors.py bench/anchors/results.jsonl

Prints a Markdown table, one line per row: each anchor's median ms per step with its spread
(min-max over the rounds, as a percentage of the median), and Kestrel's speed relative to each
anchor (anchor median / Kestrel median: above 1 means Kestrel is faster). Where the sitting has
Kestrel's bf16 rows (--amp bf16 on CPUs with AVX-512 BF16 or AMX), a second table gives their
speed against PyTorch fp32, PyTorch bf16 autocast and Kestrel fp32. Standard library only.
"""
import json
import statistics
import sys

ANCHORS = [("kestrel", "Kestrel fp32"), ("kestrel-bf16", "Kestrel bf16"), ("torch-fp32", "PyTorch 2.15 fp32"),
           ("torch-bf16", "PyTorch 2.15 bf16 autocast"), ("torch113-fp32", "PyTorch 1.13 fp32"),
           ("onnxruntime", "ONNX Runtime")]


def load(path):
    runs = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                run = json.loads(line)
                ms = float(run["result"]["ms_per_step"])
                key = (run["row"], run["anchor"])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"summarize_anchors: {path}:{number}: not a compare_anchors.sh line ({e})")
            runs.setdefault(key, []).append(ms)
    return runs


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize_anchors.py RESULTS.jsonl (written by bench/anchors/compare_anchors.sh)")
    runs = load(sys.argv[1])
    rows = list(dict.fromkeys(row for row, _ in runs))
    others = [a for a in ANCHORS if a[0] not in ("kestrel", "kestrel-bf16")]
    print("| row | " + " | ".join(f"{label} ms (spread)" for _, label in ANCHORS) +
          " | " + " | ".join(f"Kestrel fp32 vs {label}" for _, label in others) + " |")
    print("|---" * (1 + len(ANCHORS) + len(others)) + "|")
    all_medians = {}
    for row in rows:
        medians, cells = {}, []
        for anchor, _ in ANCHORS:
            times = runs.get((row, anchor))
            if not times:
                cells.append("-")
                continue
            m = medians[anchor] = statistics.median(times)
            spread = 100 * (max(times) - min(times)) / m
            cells.append(f"{m:.0f} (±{spread / 2:.0f} %, n={len(times)})")
        all_medians[row] = medians
        print(f"| {row} | " + " | ".join(cells) + " | " + " | ".join(ratio(medians, a, "kestrel") for a, _ in others) + " |")
    bf16_rows = [row for row in rows if "kestrel-bf16" in all_medians[row]]
    if bf16_rows:
        versus = [("torch-fp32", "PyTorch 2.15 fp32"), ("torch-bf16", "PyTorch 2.15 bf16 autocast"),
                  ("kestrel", "Kestrel fp32")]
        print()
        print("| row | " + " | ".join(f"Kestrel bf16 vs {label}" for _, label in versus) + " |")
        print("|---" * (1 + len(versus)) + "|")
        for row in bf16_rows:
            print(f"| {row} | " + " | ".join(ratio(all_medians[row], a, "kestrel-bf16") for a, _ in versus) + " |")


def ratio(medians, anchor, kestrel):
    """anchor median / Kestrel median, or '-' where either is missing."""
    if kestrel in medians and anchor in medians:
        return f"{medians[anchor] / medians[kestrel]:.2f}x"
    return "-"


if __name__ == "__main__":
    main()
