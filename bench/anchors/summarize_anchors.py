#!/usr/bin/env python3
"""Medians, spreads and Kestrel/anchor ratios from compare_anchors.sh's JSON lines.

    python3 bench/anchors/summarize_anchors.py bench/anchors/results.jsonl

Prints a Markdown table, one line per row: each anchor's median ms per step with its spread
(min-max over the rounds, as a percentage of the median), and Kestrel's speed relative to each
anchor (anchor median / Kestrel median: above 1 means Kestrel is faster). Where the sitting has
Kestrel's bf16 rows (--amp bf16 on CPUs with AVX-512 BF16 or AMX), a second table gives their
speed against PyTorch fp32, PyTorch bf16 autocast and Kestrel fp32. A last table puts each step
beside the machine's limit (issue 44): the model's GFLOP an image (Kestrel's count, per forward),
and each tool's share of the limit train_step measured in the same sitting (Kestrel's `mfu`; an
anchor's from its own time on the same work: fp32 rows against the float32 FMA limit, bf16 rows
against the bf16 dot-product one). Standard library only.
"""
import json
import statistics
import sys

# kestrel-bf16: bfloat16 activations (--amp bf16 on the CPU since session 22); kestrel-bf16-operands:
# float32 activations with bfloat16 convolution operands (the CPU's --amp bf16 before it).
ANCHORS = [("kestrel", "Kestrel fp32"), ("kestrel-bf16", "Kestrel bf16"),
           ("kestrel-bf16-operands", "Kestrel bf16 operands"), ("torch-fp32", "PyTorch 2.15 fp32"),
           ("torch-bf16", "PyTorch 2.15 bf16 autocast"), ("torch113-fp32", "PyTorch 1.13 fp32"),
           ("onnxruntime", "ONNX Runtime")]


def load(path, results=None):
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
            if results is not None:
                results.setdefault(key, []).append(run["result"])
    return runs


def limit_shares(runs, results, rows):
    """Rows of (row, GFLOP an image, {anchor: share of the limit}) for rows with Kestrel's counts.
    Each precision's limit is the highest any of the sitting's train_step processes measured: on a
    shared VM one process now and then finds its two vCPUs on one physical core and measures half."""
    best = {}
    for (row, anchor), lines in results.items():
        precision = {"kestrel": "fp32", "kestrel-bf16": "bf16", "kestrel-bf16-operands": "bf16"}.get(anchor)
        for r in lines if precision else []:
            if r.get("peak_gflops") and (precision == "fp32" or r.get("amp") != "off"):
                best[precision] = max(best.get(precision, 0.0), float(r["peak_gflops"]))
            elif r.get("mfu") and r.get("gflops_per_image") and precision == "fp32":
                # Lines before train_step wrote peak_gflops: the float32 limit (SGEMM's) from the
                # share; their bf16 rows have no bf16 limit to be put beside.
                passes = 1.0 if r.get("mode") == "inference" else 3.0
                peak = passes * float(r["gflops_per_image"]) * float(r["images_per_s"]) / float(r["mfu"])
                best[precision] = max(best.get(precision, 0.0), peak)
    out = []
    for row in rows:
        limits, gflops = {}, None
        for kestrel_anchor, precision in (("kestrel", "fp32"), ("kestrel-bf16", "bf16")):
            for r in results.get((row, kestrel_anchor), []):
                if r.get("gflops_per_image") and precision in best:
                    gflops = float(r["gflops_per_image"])
                    passes = 1.0 if r.get("mode") == "inference" else 3.0
                    limits[precision] = (best[precision], passes, int(r["batch"]))
        if gflops is None:
            continue
        shares = {}
        for anchor, precision in (("kestrel", "fp32"), ("torch-fp32", "fp32"), ("kestrel-bf16", "bf16"),
                                  ("kestrel-bf16-operands", "bf16"), ("torch-bf16", "bf16"),
                                  ("onnxruntime", "fp32")):
            times = runs.get((row, anchor))
            if not times or precision not in limits:
                continue
            peak, passes, batch = limits[precision]
            shares[anchor] = passes * gflops * batch / (statistics.median(times) / 1e3) / peak
        out.append((row, gflops, shares))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize_anchors.py RESULTS.jsonl (written by bench/anchors/compare_anchors.sh)")
    results = {}
    runs = load(sys.argv[1], results)
    rows = list(dict.fromkeys(row for row, _ in runs))
    others = [a for a in ANCHORS if a[0] not in ("kestrel", "kestrel-bf16", "kestrel-bf16-operands")]
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
                  ("kestrel", "Kestrel fp32"), ("kestrel-bf16-operands", "Kestrel bf16 operands")]
        print()
        print("| row | " + " | ".join(f"Kestrel bf16 vs {label}" for _, label in versus) + " |")
        print("|---" * (1 + len(versus)) + "|")
        for row in bf16_rows:
            print(f"| {row} | " + " | ".join(ratio(all_medians[row], a, "kestrel-bf16") for a, _ in versus) + " |")
    shares = limit_shares(runs, results, rows)
    if shares:
        columns = [("kestrel", "Kestrel fp32"), ("torch-fp32", "PyTorch fp32"), ("kestrel-bf16", "Kestrel bf16"),
                   ("kestrel-bf16-operands", "Kestrel bf16 operands"), ("torch-bf16", "PyTorch bf16 autocast"),
                   ("onnxruntime", "ONNX Runtime")]
        print()
        print("| row | GFLOP an image (forward) | " + " | ".join(f"{label}: share of the limit" for _, label in columns) + " |")
        print("|---" * (2 + len(columns)) + "|")
        for row, gflops, share in shares:
            cells = [f"{100 * share[a]:.0f} %" if a in share else "-" for a, _ in columns]
            print(f"| {row} | {gflops:.2f} | " + " | ".join(cells) + " |")


def ratio(medians, anchor, kestrel):
    """anchor median / Kestrel median, or '-' where either is missing."""
    if kestrel in medians and anchor in medians:
        return f"{medians[anchor] / medians[kestrel]:.2f}x"
    return "-"


if __name__ == "__main__":
    main()
