#!/usr/bin/env bash
# Installs oneDNN 3.2 (Intel's onednn-cpu-gomp and onednn-devel-cpu-gomp wheels from PyPI, release
# 2023.2.0: the newest oneDNN built on GNU OpenMP, the runtime Kestrel's own kernels use) into
# $KESTREL_ONEDNN_ROOT (default /opt/kestrel-onednn): lib/libdnnl.so.3 and include/. The CPU
# convolutions build against it when it is there (CMakeLists.txt, KESTREL_ONEDNN_ROOT); Debian's
# libdnnl-dev (oneDNN 2.6) is the fallback. On this project's 2-core AVX2 machine oneDNN 3.2's
# brgconv kernels made yolov5s 640 inference convolutions 1.5x faster and the yolov5n 320 b16
# training convolutions 1.1x (docs/history/performance.md). oneDNN's newer PyPI releases (2024 on) are
# built for SYCL and TBB, which Kestrel does not use.
# Idempotent; the wheels are checked against pinned SHA-256 sums. Exits 0 with a warning when PyPI
# is unreachable, so the build goes on with Debian's oneDNN.
set -euo pipefail
root=${KESTREL_ONEDNN_ROOT:-/opt/kestrel-onednn}
version=2023.2.0
declare -A sums=(
  [onednn_cpu_gomp-$version-py2.py3-none-manylinux1_x86_64.whl]=2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb
  [onednn_devel_cpu_gomp-$version-py2.py3-none-manylinux1_x86_64.whl]=9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284
)
if [[ -e $root/lib/libdnnl.so.3 && -e $root/include/oneapi/dnnl/dnnl_version.h && -e $root/.installed-$version ]]; then
  echo "install-onednn: oneDNN (release $version) present in $root"
  exit 0
fi
if [[ $(uname -m) != x86_64 ]]; then
  echo "install-onednn: the oneDNN wheels are for x86-64; building with Debian's libdnnl-dev"
  exit 0
fi
python=${KESTREL_PYTHON:-python3}
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
if ! "$python" -m pip download --quiet --disable-pip-version-check --no-deps -d "$download" \
     "onednn-cpu-gomp==$version" "onednn-devel-cpu-gomp==$version"; then
  echo "install-onednn: WARNING: could not download oneDNN $version from PyPI; the build uses" \
       "Debian's oneDNN 2.6 (slower convolutions)" >&2
  exit 0
fi
for wheel in "${!sums[@]}"; do
  [[ -f $download/$wheel ]] || { echo "install-onednn: pip did not fetch $wheel" >&2; exit 1; }
  echo "${sums[$wheel]}  $download/$wheel" | sha256sum --check --quiet ||
    { echo "install-onednn: $wheel does not match its pinned SHA-256; not installing it" >&2; exit 1; }
done
sudo_cmd=()
if [[ $(id -u) -ne 0 && ! -w $(dirname "$root") ]]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" mkdir -p "$root"
# A wheel is a zip; its files under NAME.data/data/ (lib/, include/, share/) are the install.
for wheel in "${!sums[@]}"; do
  "${sudo_cmd[@]}" "$python" - "$download/$wheel" "$root" <<'PY'
import os, shutil, sys, zipfile
wheel, root = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        parts = info.filename.split("/")
        if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data" or info.is_dir():
            continue
        target = os.path.join(root, *parts[2:])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(target + ".part", (info.external_attr >> 16) & 0o777 or 0o644)
        os.replace(target + ".part", target)
PY
done
# Wheels hold no symbolic links: the three library names arrive as three copies of 54 MB.
for name in libdnnl.so libdnnl.so.3; do
  "${sudo_cmd[@]}" ln -sf libdnnl.so.3.2 "$root/lib/$name"
done
"${sudo_cmd[@]}" touch "$root/.installed-$version"
echo "install-onednn: oneDNN 3.2 (release $version) installed in $root"
