#!/usr/bin/env bash
# Kestrel's training loader against the reference's, side by side: for each configuration (1 and 2
# workers; --cache ram on both sides, then no cache) one Kestrel row and one reference run
# alternate, ROUNDS times; prints every run's images/s as a JSON line, then the medians and the
# ratios. Both sides run at nice -20 when allowed, so a busy machine's other work weighs less.
#
#   bench/yolo/data/compare_loader.sh --yolov5 DIR [--rounds 3] [--build build]
#
# Kestrel without a cache is reported twice: the first epoch of the training default (decoded
# images kept as they load, BM_LoaderMosaic640FirstEpoch) and every image decoded each time it is
# used (BM_LoaderMosaic640, what a dataset too large for the memory budget gets).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
yolov5= rounds=3 build="$here/../../../build"
while [[ $# -gt 0 ]]; do
  case $1 in
    --yolov5) yolov5=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: $0 --yolov5 DIR [--rounds N] [--build DIR]" >&2; exit 2 ;;
  esac
done
[[ -n $yolov5 && -f $yolov5/utils/dataloaders.py ]] || { echo "--yolov5 must name a v7.0 checkout" >&2; exit 2; }
[[ -x $build/bench_kernels ]] || { echo "no $build/bench_kernels: build the bench_kernels target" >&2; exit 2; }
nice_cmd=(nice -n -20)
"${nice_cmd[@]}" true 2>/dev/null || nice_cmd=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

kestrel() {  # row workers
  (cd "$build/.." && "${nice_cmd[@]}" "$build/bench_kernels" --benchmark_filter="BM_$1/$2/" \
     --benchmark_min_time=4) | grep '"images_per_s"' | sed "s/^{/{\"side\":\"kestrel\",\"row\":\"$1\",\"workers\":$2,/"
}
reference() {  # cache workers
  "${nice_cmd[@]}" /usr/bin/python3 "$here/reference_loader.py" --yolov5 "$yolov5" --workers "$2" \
    --cache "$1" --warmup 4 --batches 16 2>/dev/null | sed "s/^{/{\"side\":\"reference\",\"row\":\"$1\",/"
}

for ((r = 1; r <= rounds; ++r)); do
  for w in 1 2; do
    kestrel LoaderMosaic640Cached "$w" | tee -a "$log"
    reference ram "$w" | tee -a "$log"
    kestrel LoaderMosaic640FirstEpoch "$w" | tee -a "$log"
    reference none "$w" | tee -a "$log"
    kestrel LoaderMosaic640 "$w" | tee -a "$log"
  done
done

/usr/bin/python3 - "$log" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(side, row, w):
    v = [r["images_per_s"] for r in runs if r["side"] == side and r["row"] == row and r["workers"] == w]
    return statistics.median(v) if v else float("nan")
for w in (1, 2):
    ref_ram, ref_none = med("reference", "ram", w), med("reference", "none", w)
    for row, ref, what in (("LoaderMosaic640Cached", ref_ram, "--cache ram"),
                           ("LoaderMosaic640FirstEpoch", ref_none, "no cache, first epoch (default)"),
                           ("LoaderMosaic640", ref_none, "no cache, every image decoded each time")):
        k = med("kestrel", row, w)
        print(json.dumps({"workers": w, "what": what, "kestrel_images_per_s": k, "reference_images_per_s": ref,
                          "kestrel_per_worker": round(k / w, 1), "reference_per_worker": round(ref / w, 1),
                          "ratio": round(k / ref, 2)}))
PY
