#!/usr/bin/env bash
# One training epoch end to end, Kestrel against the reference on PyTorch, alternating runs on the
# same machine; prints each run's wall time and the median ratio. Wall time covers the whole
# command (start-up, dataset scan, --cache ram, one epoch, saving) for both tools.
#
#   bench/epoch/compare_epoch.sh --yolov5 /tmp/yolov5 --data /tmp/coco128/coco128.yaml \
#       [--model yolov5n] [--img 320] [--batch 16] [--workers 2] [--threads 2] [--rounds 3] \
#       [--epochs 1] [--python /usr/bin/python3] [--amp off|bf16] [--out FILE.jsonl]
#
# --python picks the reference's interpreter: Debian's PyTorch 1.13 by default, or
# /opt/kestrel-bench/bin/python (scripts/install-bench-venv.sh) for the newest PyTorch. --out
# appends the result line (with both tools' per-round times) to FILE. --amp is Kestrel's (bf16:
# bfloat16 convolutions, on CPUs with AVX-512 BF16 or AMX); the reference's train.py has no CPU
# mixed precision and runs float32 either way.
#
# --yolov5 is a checkout of ultralytics/yolov5 v7.0 outside this repository (run, never copied);
# its Python dependencies come from Debian (see bench/pytorch/train_step_reference.py). The
# dataset yaml must use an absolute `path:` so that both tools read the same files.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
yolov5="" data="" model=yolov5n img=320 batch=16 workers=2 threads=2 rounds=3 epochs=1
python=/usr/bin/python3 out="" amp=off
while (($#)); do
  case $1 in
    --yolov5) yolov5=$2; shift 2 ;; --data) data=$2; shift 2 ;; --model) model=$2; shift 2 ;;
    --img) img=$2; shift 2 ;; --batch) batch=$2; shift 2 ;; --workers) workers=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;; --python) python=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    *) echo "compare_epoch: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $yolov5 && -n $data ]] || { echo "compare_epoch: give --yolov5 DIR and --data YAML" >&2; exit 2; }
kestrel=${KESTREL:-$root/build/kestrel}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

seconds() { local t0 t1; t0=$(date +%s.%N); "$@" > "$scratch/log" 2>&1 || { tail -20 "$scratch/log" >&2; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

k_times=() r_times=()
for ((i = 0; i < rounds; ++i)); do
  k=$(cd "$root" && OMP_NUM_THREADS=$threads seconds "$kestrel" train --data "$data" --cfg "models/$model.yaml" \
        --img-size "$img" --batch-size "$batch" --epochs "$epochs" --workers "$workers" --cache ram --noval \
        --noplots --device cpu --amp "$amp" --project "$scratch/k" --name "r$i")
  r=$(cd "$yolov5" && OMP_NUM_THREADS=$threads seconds "$python" "$root/bench/epoch/run_reference.py" --data "$data" --cfg "$model.yaml" \
        --weights '' --img "$img" --batch-size "$batch" --epochs "$epochs" --workers "$workers" --cache ram --noval \
        --noplots --device cpu --project "$scratch/r" --name "r$i")
  echo "round $i: kestrel ${k}s reference ${r}s"
  k_times+=("$k") r_times+=("$r")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
km=$(median "${k_times[@]}") rm_=$(median "${r_times[@]}")
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unknown)
list() { local IFS=,; echo "[$*]"; }
line="{\"bench\":\"epoch\",\"model\":\"$model\",\"img\":$img,\"batch\":$batch,\"epochs\":$epochs,\"workers\":$workers,\"threads\":$threads,\"kestrel_amp\":\"$amp\",\"torch\":\"$torch_version\",\"kestrel_s\":$km,\"reference_s\":$rm_,\"speedup\":$(echo "scale=3; $rm_ / $km" | bc),\"kestrel_runs\":$(list "${k_times[@]}"),\"reference_runs\":$(list "${r_times[@]}")}"
echo "$line"
[[ -z $out ]] || echo "$line" >> "$out"
