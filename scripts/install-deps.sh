#!/usr/bin/env bash
# Installs the Debian packages Kestrel builds against, only those missing. Idempotent.
# openmpi-bin is for the mpirun launcher test (tests/dist/launchers_test.cpp), not the build;
# libjpeg-turbo-progs (djpeg, cjpeg) for scripts/prepare-gpu-run.sh, which re-encodes coco128.
# cuDNN, cuBLAS and NCCL come from the CUDA toolkit at /usr/local/cuda (or $CUDA_HOME).
# oneDNN 3.2 comes from PyPI (scripts/install-onednn.sh); Debian's libdnnl-dev (2.6) stays the
# fallback where PyPI is out of reach.
# --sanitize also installs what scripts/sanitize.sh needs: clang 14 with its sanitizer and
# libFuzzer runtimes (libclang-rt-14-dev ships libclang_rt.fuzzer), its OpenMP runtime, and
# llvm-symbolizer for readable reports.
# OpenCV's videoio (libopencv-videoio-dev, about 100 packages with FFmpeg and GStreamer) comes by
# default, so that `kestrel detect --source vid.mp4` and streams work from the quick start; --lean
# (or KESTREL_LEAN=1) leaves it out: the build then reads images only (a video source is refused,
# saying so).
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libdnnl-dev
  libyaml-cpp-dev
  libgloo-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-dnn-dev
  libonnx-dev libprotobuf-dev python3-onnx
  libturbojpeg0-dev libpng-dev
  libcurl4-openssl-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler
  patchelf xz-utils ccache
  openmpi-bin libjpeg-turbo-progs
)
lean=${KESTREL_LEAN:-0}
for arg in "$@"; do
  case $arg in
    --sanitize) packages+=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14) ;;
    --lean) lean=1 ;;
    *) echo "install-deps: unknown argument $arg (--sanitize, --lean)" >&2; exit 2 ;;
  esac
done
((lean)) || packages+=(libopencv-videoio-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

"$(dirname "$0")/install-onednn.sh"

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -x "$cuda_home/bin/nvcc" ]]; then
  echo "install-deps: no nvcc under $cuda_home; install the CUDA 13 toolkit or set CUDA_HOME" >&2
  exit 1
fi
