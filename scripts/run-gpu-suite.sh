#!/usr/bin/env bash
# The first-GPU run: one command on a lent GPU machine, from an unpacked bundle
# (scripts/prepare-gpu-run.sh makes it), that answers every CUDA question at once. Steps, in order,
# each with its own time limit, skipped (and said so) when the remaining budget is too short:
#
#   facts       GPU, driver, CUDA/cuDNN/NCCL versions found, libraries missing (ldd), tools
#   tests       every suite of bin/tests/cuda_tests (all *_cuda_test.cpp in one binary; separate
#               *_cuda_test binaries too), 90 s each: PASS, FAIL (failing test names), TIMEOUT, SKIP
#   step        train_step yolov5s/n/m 640 b64 bf16 eager and graphed; yolov5s fp16 and fp32
#   reference   the reference's step on the same card (machine's PyTorch): AMP fp16 as train.py
#               runs it (deterministic) and at PyTorch's fastest, bf16, fp32
#   e2e         coco128, yolov5s 640 b64, 30 epochs --noval, 8 workers: Kestrel, then the reference
#   profile     train_step --profile, yolov5s bf16
#   cpubf16     the host CPU's bf16 flags; train_step yolov5s 320 b16 on the CPU with --amp off, bf16
#               (oneDNN's bf16 convolutions, where the CPU has AVX-512 BF16 or AMX) and bf16-emulated
#   sanitizer   compute-sanitizer memcheck on each failed suite, then on the rest (kernels' first) while time lasts
#
#   run-gpu-suite.sh [--budget S] [--reference DIR] [--coco128 DIR] [--steps a,b,..]
#                    [--tests NAME,..] [CUDA_LIB_DIR ...]
#
# --steps and --tests rerun a part (e.g. `--steps tests,sanitizer --tests Conv2dCuda`: suite or binary names).
# CUDA libraries come from the given directories, else $KESTREL_CUDA_LIBS (colon-separated), else
# the Python's pip wheels (site-packages/nvidia/*/lib) and /usr/local/cuda. Output in $OUT
# (default ./gpu-suite-results): summary.txt (written as the run goes, so a cut-off run still
# reports), results.jsonl (every JSON line of the benchmarks), logs.tar.xz (every log). At most 8
# files, as the GPU machine returns. The exit status is 0 when no test failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/gpu-suite-results}
budget=480 reference="" coco128="" steps=facts,tests,step,reference,e2e,profile,cpubf16,sanitizer only_tests="" dirs=()
while (($#)); do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --reference) reference=$(cd "$2" && pwd); shift 2 ;;
    --coco128) coco128=$(cd "$2" && pwd); shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --tests) only_tests=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "run-gpu-suite: unknown flag $1" >&2; exit 2 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
deadline=$((SECONDS + budget))
reserve=15  # seconds kept for packing the logs
mkdir -p "$out"
logs=$(mktemp -d)/logs
mkdir -p "$logs"
summary=$out/summary.txt results=$out/results.jsonl
: >"$summary"
: >"$results"
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - SECONDS - reserve)); }
want() { [[ ",$steps," == *",$1,"* ]]; }
# step NAME NEEDS: starts a step, or says it is skipped when fewer than NEEDS seconds remain.
step() {
  want "$1" || return 1
  if (($(left) < $2)); then say "== $1: SKIPPED ($(left) s left, needs ~$2 s)"; return 1; fi
  say "== $1 ($(left) s left)"
}
# limited SECONDS LOG CMD...: runs CMD for at most min(SECONDS, what is left) and prints
# "STATUS SECONDS_TAKEN"; STATUS is PASS, SKIP (exit 77), TIMEOUT, FAIL(exit N) or NOTIME.
limited() {
  local limit=$1 log=$2; shift 2
  local l; l=$(left); ((l < limit)) && limit=$l
  ((limit < 1)) && { echo "NOTIME 0"; return; }
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  local rc=$? status
  case $rc in 0) status=PASS ;; 77) status=SKIP ;; 124|137) status=TIMEOUT ;; *) status="FAIL(exit_$rc)" ;; esac
  echo "$status $((SECONDS - t0))"
}
pack() {
  tar -C "$(dirname "$logs")" -cf - logs | xz -T0 -6 >"$out/logs.tar.xz" 2>/dev/null ||
    tar -C "$(dirname "$logs")" -czf "$out/logs.tar.gz" logs
}
trap pack EXIT

# CUDA libraries: the given directories, else the pip wheels of the machine's Python, else the toolkit.
if ((${#dirs[@]} == 0)) && [[ -n "${KESTREL_CUDA_LIBS:-}" ]]; then IFS=: read -ra dirs <<<"$KESTREL_CUDA_LIBS"; fi
if ((${#dirs[@]} == 0)); then
  for site in $(python3 -c 'import site; print(*site.getsitepackages())' 2>/dev/null); do
    for d in "$site"/nvidia/*/lib; do [[ -d $d ]] && dirs+=("$d"); done
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [[ -d $d ]] && dirs+=("$d"); done
fi
libpath=$(IFS=:; echo "${dirs[*]}")
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)
say "run-gpu-suite: $(date -u +%FT%TZ), budget ${budget} s, GPU: ${gpus:-none}"
cd "$here"  # tests read models/ relative to the bundle root

if step facts 5; then
  # The first match in library-path order is the one the loader takes; its real name has the version.
  first_lib() { local d f; for d in "${dirs[@]}"; do for f in "$d"/$1; do [[ -e $f ]] && { readlink -f "$f"; return; }; done; done; echo "$1: not found"; }
  {
    echo "# nvidia-smi"; nvidia-smi 2>&1
    echo "# kestrel env"; bin/kestrel env 2>&1
    echo "# CUDA library directories: $libpath"
    for pat in 'libcudart.so.*' 'libcublas.so.*' 'libcudnn.so.*' 'libnccl.so.*'; do first_lib "$pat"; done
    echo "# missing libraries (ldd)"
    for b in bin/* bin/tests/*; do
      [[ -f $b ]] && ldd "$b" 2>&1 | grep 'not found' | sed "s|^|$(basename "$b"): |"
    done | sort -u
    echo "# tools"; command -v nvcc compute-sanitizer python3; nvcc --version 2>&1 | tail -1
    python3 -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda,
"cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None,
"numpy", numpy.__version__)' 2>&1 | tail -1
    nproc; free -g | head -2
  } >"$logs/facts.txt" 2>&1
  for pat in 'libcudart.so.*' 'libcublas.so.*' 'libcudnn.so.*' 'libnccl.so.*'; do say "  $(first_lib "$pat")"; done
  sed -n '/^# kestrel env/,/^# CUDA library/p' "$logs/facts.txt" | grep -v '^#' | sed 's/^/  /' | tee -a "$summary"
  say "  missing libraries: $(sed -n '/^# missing/,/^# tools/p' "$logs/facts.txt" | grep -c 'not found') (facts.txt)"
  say "  $(grep -m1 '^torch \|Error' "$logs/facts.txt")"
fi

failed_tests=()
# A unit is "binary|gtest filter|name": each test suite of the bundle's combined binary
# (bin/tests/cuda_tests, every *_cuda_test.cpp in one: kernels' suites first), and any separate
# *_cuda_test binaries (older bundles).
units=()
if [[ -x bin/tests/cuda_tests ]]; then
  suites=$(bin/tests/cuda_tests --gtest_list_tests 2>"$logs/cuda_tests_list.log" | grep -v '^ ' | awk '{sub(/\.$/, "", $1); if (!seen[$1]++) print $1}')
  [[ -n $suites ]] || units+=("bin/tests/cuda_tests||cuda_tests")  # cannot list: run it whole, its log says why
  for suite in $suites; do units+=("bin/tests/cuda_tests|$suite.*|${suite//\//_}"); done
fi
for t in bin/tests/kernels_*_cuda_test bin/tests/*_cuda_test; do [[ -x $t ]] && units+=("$t||$(basename "$t")"); done
# The suites of the newest fixes run first, so that a short loan answers them before anything else
# (issue 43: stream identity, out-of-memory paths, missing devices, cuDNN's algorithm choice and
# int limit, NMS groups, NCCL ordering).
first_suites=(CudaMemory CudaDevices CudaOutOfMemory Conv2dCudaDeterministic Conv2dCudaAlgoChoice
              Conv2dCudaLimits Conv2dCudaSteadyState NmsCuda NcclGroup)
ordered=()
for f in "${first_suites[@]}"; do
  for unit in "${units[@]}"; do [[ ${unit##*|} == "$f" ]] && ordered+=("$unit"); done
done
for unit in "${units[@]}"; do
  is_first=0
  for f in "${first_suites[@]}"; do [[ ${unit##*|} == "$f" ]] && is_first=1; done
  ((is_first)) || ordered+=("$unit")
done
units=("${ordered[@]}")
if step tests 20; then
  pass=0 fail=0 skip=0
  declare -A wanted=()
  if [[ -n $only_tests ]]; then IFS=, read -ra names <<<"$only_tests"; for n in "${names[@]}"; do wanted[$n]=1; done; fi
  declare -A seen=()
  for unit in "${units[@]}"; do
    IFS='|' read -r t filter name <<<"$unit"
    [[ -z ${seen[$name]:-} ]] || continue
    [[ -z $only_tests || -n ${wanted[$name]:-} ]] || continue
    seen[$name]=1
    args=(); [[ -n $filter ]] && args=("--gtest_filter=$filter")
    read -r status secs < <(limited 90 "$logs/$name.log" "$t" "${args[@]}")
    case $status in
      PASS) pass=$((pass + 1)) ;;
      SKIP) skip=$((skip + 1)) ;;
      NOTIME) say "  (out of time before $name)"; break ;;
      *) fail=$((fail + 1)); failed_tests+=("$unit") ;;
    esac
    names=$(grep -o '^\[  FAILED  \] [A-Za-z0-9_./]*' "$logs/$name.log" | sort -u | awk '{print $4}' | paste -sd' ')
    say "  $status  $name  ${secs}s${names:+  failed: $names}"
  done
  say "  tests: $pass passed, $fail failed, $skip skipped"
  # A GPU that nvidia-smi sees but the tests skip is a broken CUDA set-up, not a pass.
  if [[ -n $gpus ]] && ((skip > 0)); then
    say "  nvidia-smi lists a GPU but $skip binaries skipped: CUDA cannot be used here (see their logs)"
  fi
fi

# kestrel_step CONFIG...: one train_step configuration in its own process (a crash costs one row).
kestrel_step() {
  local tag=$1; shift
  local status secs
  read -r status secs < <(limited 75 "$logs/step_$tag.log" bin/train_step --img-size 640 --batch-size 64 \
    --device 0 --iters 20 --warmup 5 "$@")
  grep -h '^{' "$logs/step_$tag.log" >>"$results"
  local line; line=$(grep -h '^{' "$logs/step_$tag.log" | tail -1)
  say "  $status  $tag  ${secs}s  $(echo "$line" | grep -o '"images_per_s":[0-9.]*\|"mfu":[0-9.]*\|"peak_mem_mb":[0-9.]*\|"graph_replays":[0-9]*\|"error":"[^"]*"' | paste -sd' ')"
}
if [[ -z $gpus ]] && { want step || want profile || want e2e || want reference; }; then
  say "== step, reference, e2e, profile: SKIPPED (no GPU: nvidia-smi lists none)"
else
  if step step 60; then
    for m in yolov5s yolov5n yolov5m; do
      for g in off on; do kestrel_step "${m}_bf16_graph-$g" --model "models/$m.yaml" --amp bf16 --cuda-graph "$g"; done
    done
    for amp in fp16 off; do
      for g in off on; do kestrel_step "yolov5s_${amp}_graph-$g" --model models/yolov5s.yaml --amp "$amp" --cuda-graph "$g"; done
    done
    # The float32 rows above use FMA math only (train_step's --tf32 off); this one lets cuDNN use
    # TF32 as PyTorch does by default (cudnn.allow_tf32), for the row against the reference.
    kestrel_step "yolov5s_off_tf32_graph-off" --model models/yolov5s.yaml --amp off --tf32 on --cuda-graph off
  fi

  if step reference 40; then
    if [[ -z $reference ]]; then
      say "  SKIPPED: no --reference DIR (the v7.0 checkout)"
    else
      # ref_step TAG ARGS...: the reference's step through the machine's own PyTorch.
      ref_step() {
        local tag=$1; shift
        local status secs
        read -r status secs < <(limited 90 "$logs/ref_$tag.log" python3 "$here/bench/pytorch/train_step_reference.py" \
          --yolov5 "$reference" --device cuda --img-size 640 --batch-size 64 --iters 20 --warmup 5 --threads 8 "$@")
        grep -h '^{' "$logs/ref_$tag.log" >>"$results"
        say "  $status  ref_$tag  ${secs}s  $(grep -h '^{' "$logs/ref_$tag.log" | grep -o '"images_per_s":[0-9.]*\|"peak_mem_mb":[0-9.]*' | paste -sd' ')"
      }
      ref_step yolov5s_fp16_trainpy --model yolov5s --amp fp16 --deterministic
      ref_step yolov5s_fp16_fastest --model yolov5s --amp fp16 --cudnn-benchmark
      ref_step yolov5s_bf16_fastest --model yolov5s --amp bf16 --cudnn-benchmark
      ref_step yolov5n_fp16_trainpy --model yolov5n --amp fp16 --deterministic
      ref_step yolov5m_fp16_trainpy --model yolov5m --amp fp16 --deterministic
      ref_step yolov5s_fp32_fastest --model yolov5s --amp off --cudnn-benchmark
    fi
  fi

  # e2e_run TAG CMD...: a whole training command, timed; per-epoch times from results.csv's rows.
  e2e_run() {
    local tag=$1 csv=$2; shift 2
    ( while sleep 0.1; do [[ -f $csv ]] && echo "$(date +%s.%N) $(($(wc -l <"$csv") - 1))"; done ) >"$logs/e2e_$tag.rows" &
    local watcher=$!
    local status secs
    read -r status secs < <(limited 170 "$logs/e2e_$tag.log" "$@")
    kill "$watcher" 2>/dev/null
    local per_epoch; per_epoch=$(awk '$2 != last {if (NR > 1 && last >= 1) print $1 - t; t = $1; last = $2}' \
      "$logs/e2e_$tag.rows" | sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.2f", a[int((NR+1)/2)]}')
    echo "{\"bench\":\"e2e\",\"tool\":\"$tag\",\"status\":\"$status\",\"wall_s\":$secs,\"epoch_median_s\":${per_epoch:-null}}" >>"$results"
    say "  $status  e2e_$tag  wall ${secs} s, median epoch ${per_epoch:-?} s"
  }
  if step e2e 120; then
    if [[ -z $coco128 ]]; then
      say "  SKIPPED: no --coco128 DIR"
    else
      work=$(mktemp -d)
      sed "s|^path:.*|path: $coco128|" "$coco128/coco128.yaml" >"$work/coco128.yaml"
      common=(--img 640 --batch-size 64 --epochs 30 --noval --workers 8 --device 0 --noplots)
      e2e_run kestrel "$work/k/e2e/results.csv" bin/kestrel train --data "$work/coco128.yaml" --cfg yolov5s.yaml \
        "${common[@]}" --project "$work/k" --name e2e
      if [[ -n $reference ]]; then
        (cd "$reference" && e2e_run reference "$work/r/e2e/results.csv" python3 "$here/bench/epoch/run_reference.py" \
          --data "$work/coco128.yaml" --cfg yolov5s.yaml --weights '' "${common[@]}" --project "$work/r" --name e2e)
      fi
    fi
  fi

  if step profile 30; then
    read -r status secs < <(limited 60 "$logs/profile.log" bin/train_step --model models/yolov5s.yaml --img-size 640 --batch-size 64 \
      --amp bf16 --device 0 --iters 10 --warmup 3 --profile)
    say "  $status  profile ${secs}s (profile.log in logs.tar.xz)"
  fi
fi

# The GPU host's CPU is likely to have bf16 instructions, which the development machines lack: the
# one place to time Kestrel's CPU bf16 training and to see it agree with its float32 emulation.
if step cpubf16 45; then
  say "  CPU:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) threads, bf16 flags: $(grep -ow 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ')"
  for amp in off bf16 bf16-emulated; do
    read -r status secs < <(limited 40 "$logs/cpu_step_$amp.log" bin/train_step --model models/yolov5s.yaml \
      --img-size 320 --batch-size 16 --device cpu --amp "$amp" --iters 3 --warmup 1)
    grep -h '^{' "$logs/cpu_step_$amp.log" >>"$results"
    line=$(grep -h '^{' "$logs/cpu_step_$amp.log" | tail -1)
    say "  $status  cpu yolov5s 320 b16 --amp $amp  ${secs}s  $(echo "$line" | grep -o '"ms_per_step":[0-9.]*\|"loss":[0-9.e-]*\|"error":"[^"]*"' | paste -sd' ')"
  done
fi

if step sanitizer 30; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [[ -z $sanitizer ]]; then
    say "  SKIPPED: compute-sanitizer not found"
  elif [[ -z $gpus ]]; then
    say "  SKIPPED: no GPU"
  else
    declare -A checked=()
    for unit in "${failed_tests[@]}" "${units[@]}"; do
      IFS='|' read -r t filter name <<<"$unit"
      [[ -x $t && -z ${checked[$name]:-} ]] || continue
      checked[$name]=1
      args=(); [[ -n $filter ]] && args=("--gtest_filter=$filter")
      read -r status secs < <(limited 90 "$logs/memcheck_$name.log" "$sanitizer" --tool memcheck --error-exitcode 9 "$t" "${args[@]}")
      [[ $status == NOTIME ]] && break
      errors=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$logs/memcheck_$name.log" | tail -1)
      say "  $status  memcheck $name  ${secs}s  ${errors}"
    done
  fi
fi
say "run-gpu-suite: done after $((SECONDS - deadline + budget)) s"
grep -q 'FAIL\|TIMEOUT' <(sed -n '/^== tests/,/^== /p' "$summary") && exit 1
exit 0
