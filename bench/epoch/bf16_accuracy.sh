#!/usr/bin/env bash
# bf16 training's accuracy against float32 on the CPU (issue 29, docs/history/performance.md "Accuracy"):
# yolov5n from scratch on coco128 at 320, 100 epochs, Kestrel with --amp off and --amp bf16 (or
# bf16-emulated on CPUs without AVX-512 BF16 / AMX), both at once with one OpenMP thread each, for
# each seed; then one JSON line per run (final losses, mAP50 best / last / mean of the last ten
# epochs) appended to OUT.
#
#   bench/epoch/bf16_accuracy.sh --data /tmp/coco128/coco128.yaml [--seeds "0 1"] [--epochs 100]
#       [--bf16 bf16|bf16-emulated] [--out bench/epoch/bf16_accuracy.jsonl]
#
# About 17 minutes a seed on 2 cores (AVX-512 EPYC). The runs go to a scratch directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
data="" seeds="0 1" epochs=100 bf16=bf16 out=$root/bench/epoch/bf16_accuracy.jsonl
while (($#)); do
  case $1 in
    --data) data=$2; shift 2 ;; --seeds) seeds=$2; shift 2 ;; --epochs) epochs=$2; shift 2 ;;
    --bf16) bf16=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    *) echo "bf16_accuracy: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $data ]] || { echo "bf16_accuracy: give --data coco128.yaml" >&2; exit 2; }
kestrel=${KESTREL:-$root/build/kestrel}
scratch=$(mktemp -d)
for seed in $seeds; do
  for amp in off "$bf16"; do
    (cd "$root" && OMP_NUM_THREADS=1 "$kestrel" train --data "$data" --cfg models/yolov5n.yaml --img-size 320 \
      --batch-size 16 --epochs "$epochs" --workers 1 --device cpu --amp "$amp" --noplots --seed "$seed" \
      --project "$scratch" --name "${amp}_seed$seed" > "$scratch/${amp}_seed$seed.log" 2>&1) &
  done
  wait
  for amp in off "$bf16"; do
    python3 "$root/bench/epoch/summarize_accuracy.py" --amp "$amp" --seed "$seed" \
      "$scratch/${amp}_seed$seed/results.csv" | tee -a "$out"
  done
done
echo "bf16_accuracy: runs kept in $scratch"
