#!/usr/bin/env bash
# Installs what is missing, builds, and runs the default job on this machine (a GPU if there is
# one, else the CPU). Arguments are passed to the job.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
"$root/scripts/build.sh"
exec "$build_dir/kestrel" demo "$@"
