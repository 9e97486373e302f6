#!/usr/bin/env bash
# Installs missing dependencies, configures and builds Kestrel into $BUILD_DIR (default: build).
# --target NAME (repeatable) builds only those targets and what they need (scripts/run-default.sh
# builds just the `kestrel` binary: no tests, benchmarks or fuzz targets); without it, everything.
# Other arguments go to cmake's configure step, e.g. -DCMAKE_CUDA_ARCHITECTURES="80;90".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
targets=()
configure=()
while (($#)); do
  if [[ $1 == --target ]]; then
    [[ $# -ge 2 ]] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
    targets+=(--target "$2")
    shift 2
  else
    configure+=("$1")
    shift
  fi
done
"$root/scripts/install-deps.sh"
echo "build: configuring $build_dir"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${configure[@]}" >/dev/null
echo "build: compiling ${targets[*]:-everything} on $(nproc) cores (make's [ NN%] lines are the progress)"
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
