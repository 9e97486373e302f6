#!/usr/bin/env bash
# Kestrel against every CPU anchor in one sitting (docs/history/performance.md, "Anchors"): the same rows
# timed by Kestrel's build/train_step, the reference v7.0 on PyPI's newest PyTorch (fp32 and bf16
# autocast), the reference on Debian's PyTorch 1.13 (fp32), and, for inference, ONNX Runtime on
# `kestrel export`'s ONNX. Where the CPU has AVX-512 BF16 or AMX-BF16 (/proc/cpuinfo), the
# training rows also time Kestrel with --amp bf16 (bfloat16 activations) and with bfloat16
# convolution operands on float32 activations (train_step --amp bf16-operands, the former mode). Runs alternate within each round (the order rotates every round), all
# at the same thread count; every run's JSON line goes to OUT.jsonl tagged with its round and
# anchor, and summarize_anchors.py turns it into medians, spreads and ratios.
#
#   bench/anchors/compare_anchors.sh --yolov5 /tmp/yolov5 [--rounds 3] [--threads 2] \
#       [--out bench/anchors/results.jsonl] [--only train|inference]
#
# Needs: build/train_step and build/kestrel (cmake --build build --target train_step kestrel),
# scripts/install-bench-venv.sh (PyTorch from PyPI, torchvision, ONNX Runtime, the reference's
# Python packages), /usr/bin/python3 with Debian's python3-torch, and a v7.0 checkout outside
# this repository (--yolov5; run, never copied). The ONNX files are exported from random-init
# weights written by the reference's Model (seed 0) into a scratch directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
yolov5="" rounds=3 threads=2 out=$root/bench/anchors/results.jsonl only=""
train_iters=2 train_warmup=1 bf16_iters=1 bf16_warmup=1 infer_iters=5 infer_warmup=1
while (($#)); do
  case $1 in
    --yolov5) yolov5=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; --only) only=$2; shift 2 ;;
    --train-iters) train_iters=$2; shift 2 ;; --bf16-iters) bf16_iters=$2; shift 2 ;;
    --infer-iters) infer_iters=$2; shift 2 ;;
    *) echo "compare_anchors: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $yolov5 && -f $yolov5/models/yolo.py ]] || {
  echo "compare_anchors: give --yolov5 DIR, a checkout of ultralytics/yolov5 v7.0" >&2; exit 2; }
bench_python=${KESTREL_BENCH_PYTHON:-/opt/kestrel-bench/bin/python}
debian_python=${KESTREL_DEBIAN_PYTHON:-/usr/bin/python3}
train_step=${TRAIN_STEP:-$root/build/train_step}
kestrel=${KESTREL:-$root/build/kestrel}
for tool in "$bench_python" "$debian_python" "$train_step" "$kestrel"; do
  [[ -x $tool ]] || { echo "compare_anchors: $tool is missing (see the header of $0)" >&2; exit 2; }
done
export LD_LIBRARY_PATH=${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_NUM_THREADS=$threads
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
reference=("$root/bench/pytorch/train_step_reference.py" --yolov5 "$yolov5" --threads "$threads")
onnx_runner=("$root/bench/onnxruntime/inference_onnxruntime.py" --threads "$threads")

# The ONNX anchor's model: random-init yolov5s from the reference's Model, exported by Kestrel.
export_onnx() {  # model size -> path
  local pt=$scratch/$1_$2.pt
  # Written by PyPI's PyTorch (Debian's python3-torch may be missing; Kestrel reads both's files).
  (cd "$yolov5" && "$bench_python" - "$1" "$pt" "$root/bench/pytorch" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import reference_shims
reference_shims.apply(".")
import torch
from models.yolo import Model
torch.manual_seed(0)
torch.save({"model": Model(f"models/{sys.argv[1]}.yaml", ch=3, nc=80).half(), "epoch": -1}, sys.argv[2])
PY
  ) > "$scratch/export.log" 2>&1 || { tail -20 "$scratch/export.log" >&2; exit 1; }
  "$kestrel" export --weights "$pt" --img-size "$2" >> "$scratch/export.log" 2>&1 ||
    { tail -20 "$scratch/export.log" >&2; exit 1; }
  echo "${pt%.pt}.onnx"
}

# One run: its JSON line, tagged, appended to $out. Failures stop the sitting with the log.
run() {  # round anchor row command...
  local round=$1 anchor=$2 row=$3; shift 3
  local t0=$SECONDS line
  if ! "$@" > "$scratch/log" 2>&1; then
    echo "compare_anchors: $anchor $row failed:" >&2; tail -20 "$scratch/log" >&2; exit 1
  fi
  line=$(grep '^{' "$scratch/log" | tail -1)
  echo "{\"round\":$round,\"anchor\":\"$anchor\",\"row\":\"$row\",\"wall_s\":$((SECONDS - t0)),\"result\":$line}" >> "$out"
  echo "round $round $row $anchor: $(grep -o '"ms_per_step":[^,]*' <<< "$line") ($((SECONDS - t0)) s)"
}

# Rows: name, then the arguments each tool takes for it.
train_rows=("train yolov5n 320 b16" "train yolov5s 320 b16")
train_args=("--model yolov5n --img-size 320 --batch-size 16" "--model yolov5s --img-size 320 --batch-size 16")
infer_row="inference yolov5s 640 b1"
infer_args="--model yolov5s --img-size 640 --batch-size 1"

train_anchor() {  # round row args anchor
  local round=$1 row=$2 args=$3 anchor=$4
  # shellcheck disable=SC2086  # args are words
  case $anchor in
    kestrel) run "$round" kestrel "$row" "$train_step" $args --amp off --device cpu \
               --iters "$train_iters" --warmup "$train_warmup" ;;
    kestrel-bf16) run "$round" kestrel-bf16 "$row" "$train_step" $args --amp bf16 --device cpu \
               --iters "$train_iters" --warmup "$train_warmup" ;;
    kestrel-bf16-operands) run "$round" kestrel-bf16-operands "$row" "$train_step" $args --amp bf16-operands \
               --device cpu --iters "$train_iters" --warmup "$train_warmup" ;;
    torch-fp32) run "$round" torch-fp32 "$row" "$bench_python" "${reference[@]}" $args \
               --iters "$train_iters" --warmup "$train_warmup" ;;
    torch-bf16) run "$round" torch-bf16 "$row" "$bench_python" "${reference[@]}" $args --amp bf16 \
               --iters "$bf16_iters" --warmup "$bf16_warmup" ;;
    torch113-fp32) run "$round" torch113-fp32 "$row" "$debian_python" "${reference[@]}" $args \
               --iters "$train_iters" --warmup "$train_warmup" ;;
  esac
}
infer_anchor() {  # round anchor onnx
  local round=$1 anchor=$2 onnx=$3 row=$infer_row args=$infer_args
  # shellcheck disable=SC2086
  case $anchor in
    kestrel) run "$round" kestrel "$row" "$train_step" $args --amp off --device cpu --forward-only \
               --iters "$infer_iters" --warmup "$infer_warmup" ;;
    torch-fp32) run "$round" torch-fp32 "$row" "$bench_python" "${reference[@]}" $args --forward-only \
               --iters "$infer_iters" --warmup "$infer_warmup" ;;
    torch113-fp32) run "$round" torch113-fp32 "$row" "$debian_python" "${reference[@]}" $args --forward-only \
               --iters "$infer_iters" --warmup "$infer_warmup" ;;
    onnxruntime) run "$round" onnxruntime "$row" "$bench_python" "${onnx_runner[@]}" --onnx "$onnx" \
               --model yolov5s --iters "$infer_iters" --warmup "$infer_warmup" ;;
  esac
}
rotate() {  # k items... -> the items rotated left by k
  local k=$1; shift; local n=$#; local items=("$@") i
  for ((i = 0; i < n; ++i)); do echo "${items[(i + k) % n]}"; done
}

onnx=""
[[ $only == train ]] || onnx=$(export_onnx yolov5s 640)
kestrel_bf16=""
[[ $(cat /proc/cpuinfo) =~ avx512_bf16|amx_bf16 ]] && kestrel_bf16="kestrel-bf16 kestrel-bf16-operands"
# Debian's PyTorch 1.13 (python3-torch) where it is installed; without it that anchor is left out
# of the sitting (said here), the others run.
torch113=torch113-fp32
if ! "$debian_python" -c 'import torch' 2>/dev/null; then
  torch113=""
  echo "compare_anchors: $debian_python has no torch (Debian's python3-torch): the PyTorch 1.13 anchor is left out"
fi
mkdir -p "$(dirname "$out")"
echo "compare_anchors: $(date -u +%FT%TZ), $rounds rounds, $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), results in $out"
for ((r = 0; r < rounds; ++r)); do
  if [[ $only != inference ]]; then
    for i in "${!train_rows[@]}"; do
      for anchor in $(rotate "$r" kestrel $kestrel_bf16 torch-fp32 torch-bf16 $torch113); do
        train_anchor "$r" "${train_rows[i]}" "${train_args[i]}" "$anchor"
      done
    done
  fi
  if [[ $only != train ]]; then
    for anchor in $(rotate "$r" kestrel torch-fp32 $torch113 onnxruntime); do
      infer_anchor "$r" "$anchor" "$onnx"
    done
  fi
done
python3 "$root/bench/anchors/summarize_anchors.py" "$out"
