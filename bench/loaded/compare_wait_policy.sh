#!/usr/bin/env bash
# Kestrel on an idle and on a loaded machine, with its default OpenMP wait (a 30000-round spin,
# base/openmp_wait.h) and with OMP_WAIT_POLICY=passive, against the reference (issue 41, part 3).
#
#   bench/loaded/compare_wait_policy.sh --yolov5 /tmp/yolov5 [--python /opt/kestrel-bench/bin/python]
#       [--rounds 3] [--threads 2] [--only train|val|detect] [--out FILE.jsonl]
#
# Three commands, each timed whole (wall clock, start-up included), in turns: Kestrel default,
# Kestrel passive, the reference:
#   train:  one coco128 epoch, yolov5n 320 b16, --cache ram --noval --noplots, 2 workers
#   val:    coco128 at 640, batch 32, tests/data/yolov5n_coco80.pt (a reference-format yolov5n)
#   detect: coco128's 128 images at 640, the same weights, --nosave
# "Loaded" runs them beside a second process that keeps every core busy (one spinning Python
# thread of control per core, niceness 0, started before and stopped after each run), as another
# job on a shared workstation or node does. The reference runs from its checkout, with the same
# OMP_NUM_THREADS. Prints one JSON line per command and load (medians and per-run times);
# --out appends them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
yolov5="" python=/usr/bin/python3 rounds=3 threads=2 only="" out=""
while (($#)); do
  case $1 in
    --yolov5) yolov5=$2; shift 2 ;; --python) python=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;; --only) only=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    *) echo "compare_wait_policy: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $yolov5 ]] || { echo "compare_wait_policy: give --yolov5 DIR (a v7.0 checkout)" >&2; exit 2; }
kestrel=${KESTREL:-$root/build/kestrel}
source=$root/../shared/datasets/coco128
[[ -d $source ]] || { echo "compare_wait_policy: needs $source" >&2; exit 2; }
weights=$root/tests/data/yolov5n_coco80.pt
scratch=$(mktemp -d)
load_pids=()
stop_load() { ((${#load_pids[@]})) && kill "${load_pids[@]}" 2>/dev/null; wait "${load_pids[@]}" 2>/dev/null || true; load_pids=(); }
trap 'stop_load; rm -rf "$scratch"' EXIT
data=$scratch/coco128.yaml
{ echo "path: $(cd "$source" && pwd)"; sed -n '/^train:/,$p' "$source/coco128.yaml"; } > "$data"
cores=$(nproc)

start_load() {
  for ((c = 0; c < cores; ++c)); do
    python3 -c 'while True: pass' & load_pids+=($!)
  done
  sleep 1
}

run() {  # tool (default|passive|reference), command (train|val|detect), name
  local env=(OMP_NUM_THREADS=$threads) args
  [[ $1 == passive ]] && env+=(OMP_WAIT_POLICY=passive)
  case $2 in
    train) args=(--data "$data" --weights '' --img 320 --batch 16 --epochs 1 --workers 2 --cache ram
                 --noval --noplots --project "$scratch/runs" --name "$3") ;;
    val) args=(--data "$data" --weights "$weights" --img 640 --batch 32 --project "$scratch/runs" --name "$3") ;;
    detect) args=(--source "$source/images/train2017" --weights "$weights" --img 640 --nosave
                  --project "$scratch/runs" --name "$3") ;;
  esac
  local t0 t1
  t0=$(date +%s.%N)
  if [[ $1 == reference ]]; then
    [[ $2 == train ]] && args+=(--cfg yolov5n.yaml)
    (cd "$yolov5" && env "${env[@]}" "$python" "$root/bench/epoch/run_reference.py" --script "$2.py" "${args[@]}") \
      > "$scratch/log" 2>&1 || { tail -20 "$scratch/log" >&2; exit 1; }
  else
    [[ $2 == train ]] && args+=(--cfg models/yolov5n.yaml)
    (cd "$root" && env "${env[@]}" "$kestrel" "$2" "${args[@]}") > "$scratch/log" 2>&1 ||
      { tail -20 "$scratch/log" >&2; exit 1; }
  fi
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }  # JSON needs the leading 0
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
list() { local IFS=,; echo "[$*]"; }
commands=(train val detect)
[[ -z $only ]] || commands=("$only")
for command in "${commands[@]}"; do
  for load in idle loaded; do
    declare -A times=([default]="" [passive]="" [reference]="")
    for ((i = 0; i < rounds; ++i)); do
      for tool in default passive reference; do
        [[ $load == loaded ]] && start_load
        t=$(run "$tool" "$command" "$tool-$command-$load-$i")
        stop_load
        echo "$command $load round $i: $tool ${t}s" >&2
        times[$tool]+="$t "
      done
    done
    d=$(median ${times[default]}) p=$(median ${times[passive]}) r=$(median ${times[reference]})
    line="{\"bench\":\"wait_policy\",\"command\":\"$command\",\"load\":\"$load\",\"threads\":$threads,\"cores\":$cores,\"default_s\":$d,\"passive_s\":$p,\"reference_s\":$r,\"default_vs_reference\":$(ratio "$r" "$d"),\"passive_vs_default\":$(ratio "$d" "$p"),\"default_runs\":$(list ${times[default]}),\"passive_runs\":$(list ${times[passive]}),\"reference_runs\":$(list ${times[reference]})}"
    echo "$line"
    [[ -z $out ]] || echo "$line" >> "$out"
    unset times
  done
done
