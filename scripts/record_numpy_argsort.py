#!/usr/bin/env python3
"""Records numpy's default argsort orderings for tests/yolo/data/numpy_argsort_test.cpp.

The reference (YOLOv5) orders rectangular batches with `ar.argsort()` on float64 aspect
ratios: numpy's default kind, an unstable introsort whose order among equal keys is what
Kestrel reproduces (yolo/data/numpy_argsort.cpp). Orderings must come from numpy 1.24's
algorithm: newer numpy on AVX-512 machines may hand argsort to x86-simd-sort, which orders
ties differently. This script therefore carries its own transcription of the 1.24 algorithm
(`introsort_argsort`), records with it, and cross-checks it against the local numpy on every
case (they agree exactly under numpy 1.24, whose argsort has no SIMD dispatch). Under another
numpy version the cross-check only holds where the keys have no ties, and the script says so.

    /usr/bin/python3 scripts/record_numpy_argsort.py tests/yolo/data/numpy_argsort_orders.txt

Output: for each case, three lines: `case NAME N`, `keys K...` (Python repr, round-trips
exactly), `order I...`.
"""
import math
import sys

import numpy as np

SMALL = 15  # numpy's SMALL_QUICKSORT: partitions with pr - pl <= 15 go to insertion sort


def less(a, b):
    """numpy's float ordering: NaN after every number."""
    return a < b or (b != b and a == a)


def heapsort_range(v, idx, lo, n, less_fn):
    """numpy's aheapsort_ on idx[lo:lo+n] (1-based heap over the slice)."""
    def get(k):
        return idx[lo + k - 1]

    def put(k, x):
        idx[lo + k - 1] = x

    def sift(tmp, i, j, m):
        while j <= m:
            if j < m and less_fn(get(j), get(j + 1)):
                j += 1
            if less_fn(tmp, get(j)):
                put(i, get(j))
                i = j
                j += j
            else:
                break
        put(i, tmp)

    for l in range(n >> 1, 0, -1):
        sift(get(l), l, l << 1, n)
    m = n
    while m > 1:
        tmp = get(m)
        put(m, get(1))
        m -= 1
        sift(tmp, 1, 2, m)


def introsort_argsort(keys, less_fn=None, stats=None):
    """numpy 1.24 aquicksort_: median-of-3 quicksort, insertion sort below 16 elements, heapsort
    once the depth budget 2*floor(log2 n) is spent. less_fn compares two indices."""
    n = len(keys)
    if less_fn is None:
        less_fn = lambda i, j: less(keys[i], keys[j])
    idx = list(range(n))
    if n < 2:
        return idx
    stack = []
    pl, pr = 0, n - 1
    cdepth = 2 * (n.bit_length() - 1)
    while True:
        if cdepth < 0:
            if stats is not None:
                stats["heapsort"] = stats.get("heapsort", 0) + 1
            heapsort_range(keys, idx, pl, pr - pl + 1, less_fn)
        else:
            while pr - pl > SMALL:
                pm = pl + ((pr - pl) >> 1)
                if less_fn(idx[pm], idx[pl]):
                    idx[pm], idx[pl] = idx[pl], idx[pm]
                if less_fn(idx[pr], idx[pm]):
                    idx[pr], idx[pm] = idx[pm], idx[pr]
                if less_fn(idx[pm], idx[pl]):
                    idx[pm], idx[pl] = idx[pl], idx[pm]
                vp = idx[pm]
                pi, pj = pl, pr - 1
                idx[pm], idx[pj] = idx[pj], idx[pm]
                while True:
                    pi += 1
                    while less_fn(idx[pi], vp):
                        pi += 1
                    pj -= 1
                    while less_fn(vp, idx[pj]):
                        pj -= 1
                    if pi >= pj:
                        break
                    idx[pi], idx[pj] = idx[pj], idx[pi]
                pk = pr - 1
                idx[pi], idx[pk] = idx[pk], idx[pi]
                if pi - pl < pr - pi:
                    stack.append((pi + 1, pr))
                    pr = pi - 1
                else:
                    stack.append((pl, pi - 1))
                    pl = pi + 1
                cdepth -= 1
                stack[-1] = stack[-1] + (cdepth,)
            for i in range(pl + 1, pr + 1):
                vi = idx[i]
                j = i
                while j > pl and less_fn(vi, idx[j - 1]):
                    idx[j] = idx[j - 1]
                    j -= 1
                idx[j] = vi
        if not stack:
            return idx
        pl, pr, cdepth = stack.pop()


def adversarial_keys(n):
    """McIlroy's 'antiqsort' adversary against introsort_argsort: keys on which every partition
    is lopsided, so the depth budget runs out and heapsort takes over."""
    gas = n
    val = [gas] * n
    state = {"solid": 0, "candidate": 0}

    def freeze(x):
        val[x] = state["solid"]
        state["solid"] += 1

    def adversary_less(x, y):
        if val[x] == gas and val[y] == gas:
            freeze(x if x == state["candidate"] else y)
        if val[x] == gas:
            state["candidate"] = x
        elif val[y] == gas:
            state["candidate"] = y
        return val[x] < val[y]

    introsort_argsort(val, adversary_less)
    for i in range(n):
        if val[i] == gas:
            freeze(i)
    return [float(v) for v in val]


def cases():
    rng = np.random.default_rng(20240516)
    # Aspect ratios h / w of common photo shapes: COCO is mostly 640x480 (0.75) and 480x640.
    common = [480 / 640, 640 / 480, 427 / 640, 640 / 427, 1.0, 360 / 640, 424 / 640, 612 / 612]
    out = []
    for n in (5, 16, 17, 100, 128, 1000):
        out.append((f"ties_{n}", [float(x) for x in rng.choice(common[:4], size=n)]))
    out.append(("all_equal_1000", [0.75] * 1000))
    out.append(("all_equal_17", [1.0] * 17))
    # Mostly 0.75 with a sprinkling of other shapes, as COCO's val2017.
    k = rng.choice(common, size=1000, p=[0.72, 0.08, 0.06, 0.04, 0.03, 0.03, 0.02, 0.02])
    out.append(("coco_like_1000", [float(x) for x in k]))
    out.append(("coarse_heights_500", [int(h) / 640.0 for h in rng.integers(200, 260, size=500)]))
    out.append(("distinct_300", [float(x) for x in rng.random(300)]))
    out.append(("nan_inf_20", [0.5, math.nan, 1.0, math.inf, 0.5, -math.inf, 0.25, math.nan, 1.0, 0.0,
                               0.5, 2.0, math.nan, 0.75, 0.75, 0.5, 1.0, -0.0, 0.0, 0.75]))
    # Heapsort fallback: the adversary's keys halved to integers, so pairs tie inside heapsort.
    adv = adversarial_keys(600)
    out.append(("heapsort_ties_600", [float(int(v) // 2) for v in adv]))
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "-"
    newer = tuple(int(p) for p in np.__version__.split(".")[:2]) != (1, 24)
    lines = []
    for name, keys in cases():
        stats = {}
        ours = introsort_argsort(keys, stats=stats)
        local = np.argsort(np.array(keys, dtype=np.float64)).tolist()
        ties = len(set(map(repr, keys))) < len(keys)
        if ours != local and not (newer and ties):
            sys.exit(f"{name}: the transcription disagrees with numpy {np.__version__}")
        if name.startswith("heapsort") and not stats.get("heapsort"):
            sys.exit(f"{name}: the adversarial keys no longer reach heapsort")
        note = "" if ours == local else f" (numpy {np.__version__} differs on ties)"
        print(f"{name}: n={len(keys)} heapsort={stats.get('heapsort', 0)}{note}", file=sys.stderr)
        lines.append(f"case {name} {len(keys)}")
        lines.append("keys " + " ".join(repr(k) for k in keys))
        lines.append("order " + " ".join(str(i) for i in ours))
    text = "\n".join(lines) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
