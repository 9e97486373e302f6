#!/usr/bin/env bash
# Epochs with each image cache of `kestrel train` (issue 40, part 3): --cache disk (decoded images
# read back from .npy files beside the images), --cache ram (decoded once, kept in memory) and no
# cache (every image decoded every time it is drawn), in turns, on the same machine.
#
#   bench/epoch/cache_modes.sh [--source ../shared/datasets/coco128] [--model yolov5n] [--img 320]
#       [--batch 16] [--workers 2] [--threads 2] [--epochs 3] [--rounds 3] [--out FILE.jsonl]
#
# The source's images and labels are hard-linked into a scratch folder first
# (bench/yolo/data/make_coco_sized.py, as many images as the source has), because --cache disk
# writes beside the images and the shared datasets are read-only.
# Each run trains --epochs epochs with --noval --noplots; its wall time covers start-up and the
# cache's own filling (decoding every image once for ram; writing the .npy files, on the first
# disk run only: they stay beside the images, as the reference's, and later runs read them).
# Before the first round one disk run writes the .npy files untimed, so the disk rows time reading
# them. Prints each run and one JSON line of medians; --out appends it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source=$root/../shared/datasets/coco128 model=yolov5n img=320 batch=16 workers=2 threads=2 epochs=3 rounds=3 out=""
while (($#)); do
  case $1 in
    --source) source=$2; shift 2 ;; --model) model=$2; shift 2 ;; --img) img=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;; --workers) workers=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    *) echo "cache_modes: unknown argument $1" >&2; exit 2 ;;
  esac
done
kestrel=${KESTREL:-$root/build/kestrel}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
count=$(find "$source/images/train2017" -maxdepth 1 -type f | wc -l)
python3 "$root/bench/yolo/data/make_coco_sized.py" --source "$source" --out "$scratch/set" \
  --images "$count" --val 16 > /dev/null
data=$scratch/set/data.yaml

train() {  # cache mode (none, ram, disk), run name
  local flags=()
  [[ $1 == none ]] || flags=(--cache "$1")
  OMP_NUM_THREADS=$threads "$kestrel" train --data "$data" --cfg "models/$model.yaml" --weights '' \
    --img "$img" --batch "$batch" --epochs "$epochs" --workers "$workers" --noval --noplots \
    --device cpu --project "$scratch/runs" --name "$2" "${flags[@]}" > "$scratch/log" 2>&1 ||
    { tail -20 "$scratch/log" >&2; exit 1; }
}
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }

cd "$root"
train disk warmup  # writes the .npy files
declare -A runs=([none]="" [ram]="" [disk]="")
for ((i = 0; i < rounds; ++i)); do
  for mode in none ram disk; do
    t=$(seconds train "$mode" "$mode$i")
    echo "round $i: --cache $mode ${t}s"
    runs[$mode]+="$t "
  done
done
median() { printf '%s\n' $@ | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
list() { echo "[$(echo $@ | tr ' ' ',')]"; }
n=$(median ${runs[none]}) r=$(median ${runs[ram]}) d=$(median ${runs[disk]})
line="{\"bench\":\"cache_modes\",\"model\":\"$model\",\"img\":$img,\"batch\":$batch,\"epochs\":$epochs,\"workers\":$workers,\"threads\":$threads,\"none_s\":$n,\"ram_s\":$r,\"disk_s\":$d,\"none_runs\":$(list ${runs[none]}),\"ram_runs\":$(list ${runs[ram]}),\"disk_runs\":$(list ${runs[disk]})}"
echo "$line"
[[ -z $out ]] || echo "$line" >> "$out"
