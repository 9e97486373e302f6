#!/usr/bin/env bash
# The sanitizer half of CI, after scripts/test.sh: any sanitizer report, fuzzer crash or failed
# test fails it.
#   1. build-asan (clang 14, -DKESTREL_SANITIZE=address,undefined -DKESTREL_FUZZ=ON): the CPU unit
#      tests (ctest -LE 'gpu|slow') and the fuzz targets, each fuzzed for $FUZZ_SECONDS (default
#      30) from its checked-in corpus, two at a time.
#   2. build-tsan (clang 14, -DKESTREL_SANITIZE=thread): the tests labelled `threads`.
# Only the targets those runs need are built (cpu_tests, fuzz_targets, thread_tests); nvcc still
# compiles the CUDA sources, unsanitized (ccache makes them hits after scripts/test.sh).
# Fuzz longer: FUZZ_SECONDS=600 scripts/sanitize.sh, or one target by hand (README).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
asan_dir=${ASAN_BUILD_DIR:-$root/build-asan}
tsan_dir=${TSAN_BUILD_DIR:-$root/build-tsan}
fuzz_seconds=${FUZZ_SECONDS:-30}
jobs=$(nproc)
"$root/scripts/install-deps.sh" --sanitize

# Reports name source lines; every report stops the process with a non-zero status.
export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would otherwise keep its guard.
export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1
export LSAN_OPTIONS=print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=suppressions=$root/scripts/sanitize/tsan.supp:halt_on_error=1:second_deadlock_stack=1

# Release keeps nvcc's flags those of the normal build, so its CUDA objects come from ccache;
# C++ gets -O1, the level the sanitizers' authors recommend (fast to build, exact reports).
configure() {  # build dir, sanitizers, extra cmake arguments
  local dir=$1 sanitize=$2
  shift 2
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
        -DCMAKE_CXX_COMPILER=clang++-14 -DKESTREL_SANITIZE="$sanitize" "$@" >/dev/null
}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}

phase_start=$SECONDS
timing=()
phase_done() {
  timing+=("$(printf '%-34s %5d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}

configure "$asan_dir" address,undefined -DKESTREL_FUZZ=ON
cmake --build "$asan_dir" -j "$jobs" --target cpu_tests fuzz_targets
phase_done "build-asan (CPU tests, fuzzers)"
# allocator_may_return_null: a failed allocation throws std::bad_alloc as it does without ASan
# (image_codec_test caps its address space to see that failure become an Error naming the file).
ASAN_OPTIONS=$ASAN_OPTIONS:allocator_may_return_null=1 \
  ctest --test-dir "$asan_dir" --output-on-failure -j "$jobs" -LE 'gpu|slow'
phase_done "ASan+UBSan CPU tests"

# -timeout=30: no input takes a millisecond, but a busy shared machine can stall a process for
# seconds, and libFuzzer reports a stalled input as a hang. -rss_limit_mb=1024 (half libFuzzer's
# default, which is also its limit on one allocation): the readers hold their work to budgets
# (pickle::WalkBudget, the unpickler's object cap, a tensor's expansion), so an input that makes
# one take a gigabyte is a memory bomb, reported as a finding.
fuzz_one() {  # target name; new inputs go to a scratch folder, never into the checked-in corpus
  local name=$1 scratch="$asan_dir/fuzz-scratch/$1"
  mkdir -p "$scratch" "$asan_dir/fuzz-artifacts"
  "$asan_dir/fuzz_$name" -max_total_time="$fuzz_seconds" -timeout=30 -rss_limit_mb=1024 -print_final_stats=1 \
      -dict="$root/fuzz/dict/$name.dict" -artifact_prefix="$asan_dir/fuzz-artifacts/$name-" \
      "$scratch" "$root/fuzz/corpus/$name" >"$asan_dir/fuzz-$name.log" 2>&1
}
targets=()
for source in "$root"/fuzz/*_target.cpp; do
  name=$(basename "$source" _target.cpp)
  targets+=("$name")
done
failed=()
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  pids=()
  for name in "${targets[@]:i:2}"; do
    fuzz_one "$name" &
    pids+=("$!:$name")
  done
  for entry in "${pids[@]}"; do
    name=${entry#*:}
    if wait "${entry%%:*}"; then
      echo "fuzz_$name: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$asan_dir/fuzz-$name.log" | grep -o '[0-9]*$') executions, no finding"
    else
      failed+=("$name")
      echo "fuzz_$name FAILED; its log:" >&2
      tail -n 60 "$asan_dir/fuzz-$name.log" >&2
    fi
  done
done
phase_done "fuzzing (${#targets[@]} x ${fuzz_seconds} s, 2 at a time)"
if ((${#failed[@]} > 0)); then
  echo "sanitize: fuzz targets with findings: ${failed[*]} (inputs in $asan_dir/fuzz-artifacts)" >&2
  exit 1
fi

configure "$tsan_dir" thread
cmake --build "$tsan_dir" -j "$jobs" --target thread_tests
phase_done "build-tsan (thread tests)"
# One OpenMP thread: the OpenMP runtimes are not instrumented, so TSan cannot see their barriers
# and would report every parallel loop; the threads under test are our own.
OMP_NUM_THREADS=1 ctest --test-dir "$tsan_dir" --output-on-failure -j "$jobs" -L threads -LE 'gpu|slow'
phase_done "TSan thread tests"

printf 'sanitize: %s\n' "${timing[@]}"
