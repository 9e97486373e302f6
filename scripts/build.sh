#!/usr/bin/env bash
# Installs missing dependencies, configures and builds Kestrel into $BUILD_DIR (default: build).
# Extra arguments go to cmake's configure step, e.g. -DCMAKE_CUDA_ARCHITECTURES="80;90".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
