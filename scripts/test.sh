#!/usr/bin/env bash
# Builds everything and runs every test this machine can run. Tests labelled `gpu` report
# "Skipped" (with the reason in their log) where no CUDA device is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@"
