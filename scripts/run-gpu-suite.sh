#!/usr/bin/env bash
# Runs Kestrel's GPU tests and kernel benchmarks from an unpacked bundle (scripts/bundle.sh).
#
#   ./run-gpu-suite.sh [CUDA_LIB_DIR ...]
#
# cuDNN, NCCL and the CUDA runtime libraries are found in the given directories, else in
# $KESTREL_CUDA_LIBS (colon-separated), else in pip wheels (site-packages/nvidia/*/lib) and
# /usr/local/cuda. Results go to $OUT (default: ./gpu-suite-results): one log per test, the
# benchmark's JSON lines, and summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/gpu-suite-results}
mkdir -p "$out"

dirs=("$@")
if ((${#dirs[@]} == 0)) && [[ -n "${KESTREL_CUDA_LIBS:-}" ]]; then IFS=: read -ra dirs <<<"$KESTREL_CUDA_LIBS"; fi
if ((${#dirs[@]} == 0)); then
  while IFS= read -r d; do dirs+=("$d"); done < <(find / -path '*site-packages/nvidia/*/lib' -type d 2>/dev/null)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && dirs+=("$d"); done
fi
libpath=$(IFS=:; echo "${dirs[*]}")
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "run-gpu-suite: CUDA libraries from: $libpath" | tee "$out/summary.txt"
gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)
[[ -n $gpus ]] && echo "$gpus" | tee -a "$out/summary.txt"

cd "$here"  # tests read models/ relative to the bundle root
pass=0 fail=0 skip=0
for t in bin/tests/*_cuda_test ${KESTREL_ALL_TESTS:+bin/tests/*_test}; do
  [[ -x $t ]] || continue
  name=$(basename "$t")
  [[ -f "$out/$name.log" ]] && continue  # listed twice when running all tests
  start=$(date +%s.%N)
  "$t" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
  case $rc in
    0) pass=$((pass + 1)); status=PASS ;;
    77) skip=$((skip + 1)); status=SKIP ;;
    *) fail=$((fail + 1)); status="FAIL (exit $rc)" ;;
  esac
  echo "$status  $name  ${secs}s" | tee -a "$out/summary.txt"
done
echo "tests: $pass passed, $fail failed, $skip skipped" | tee -a "$out/summary.txt"
# A GPU that nvidia-smi sees but the tests skip is a broken CUDA set-up, not a pass.
if [[ -n $gpus ]] && ((skip > 0)); then
  echo "run-gpu-suite: nvidia-smi lists a GPU but $skip test binaries skipped: CUDA cannot be used (see their logs)" |
    tee -a "$out/summary.txt"
  fail=$((fail + skip))
fi

if [[ -x bin/bench_kernels && -z "${KESTREL_NO_BENCH:-}" ]]; then
  bin/bench_kernels --benchmark_filter="${KESTREL_BENCH_FILTER:-^[A-Za-z0-9_]+/1/}" --benchmark_min_time=0.2 \
    >"$out/bench_kernels.jsonl" 2>"$out/bench_kernels.err"
  echo "benchmarks: $(grep -c time_ms "$out/bench_kernels.jsonl") results in bench_kernels.jsonl" | tee -a "$out/summary.txt"
fi
if [[ -x bin/train_step && -z "${KESTREL_NO_BENCH:-}" ]]; then
  bin/train_step --model models/yolov5n.yaml,models/yolov5s.yaml,models/yolov5m.yaml --img-size 640 \
    --batch-size 16,32,64 --amp bf16,fp16,off --device 0 --iters 20 --warmup 5 \
    >"$out/train_step.jsonl" 2>"$out/train_step.err"
  echo "train_step: $(grep -c images_per_s "$out/train_step.jsonl") configurations in train_step.jsonl" | tee -a "$out/summary.txt"
fi
((fail == 0))
