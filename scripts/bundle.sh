#!/usr/bin/env bash
# Packs a relocatable bundle for CUDA machines that have a driver and the CUDA libraries but no
# package manager or network: the kestrel binary, the test and benchmark binaries (bench_kernels,
# train_step, overlap), the dataset and hyp yaml files (data/), the model yaml files (in models/ beside bin/, where
# `--cfg yolov5n.yaml` finds them), run-gpu-suite.sh, and every shared library they need that is
# neither part of the base system (glibc, libstdc++, libgcc) nor of the CUDA install (CUDA
# runtime, cuBLAS, cuDNN, NCCL, the driver): ldd lists them transitively, so oneDNN (libdnnl.so.2)
# comes with what it links, GNU OpenMP (libgomp.so.1) and the OpenCL ICD loader (libOpenCL.so.1,
# loaded, never used: Kestrel runs oneDNN on the CPU engine only). libcurl is not among them:
# Kestrel opens it only to download (io/curl_library.h), from the machine's own libraries.
# Binaries get RPATH
# $ORIGIN/../lib.
#
#   scripts/bundle.sh OUTDIR [--gpu-tests-only]   # build directory from $BUILD_DIR (default: build)
#
# --gpu-tests-only leaves the CPU-only test binaries out (only the CUDA tests travel: the combined
# cuda_tests binary where it is built, else every *_cuda_test), and of the
# benchmarks takes train_step only, which keeps a bundle for the GPU machine small (scripts/prepare-gpu-run.sh). The reference-side benchmark
# scripts (bench/pytorch, bench/epoch/run_reference.py) travel too, for run-gpu-suite.sh.
# Writes OUTDIR/kestrel-bundle.tar.xz and prints its size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
out_dir=${1:?usage: scripts/bundle.sh OUTDIR [--gpu-tests-only]}
test_pattern='*_test' benches=(bench_kernels train_step overlap)
# The GPU run (run-gpu-suite.sh) times train_step only: the kernel microbenchmarks and the overlap
# tool stay home, which keeps what travels under the device tool's limit.
[[ ${2:-} == --gpu-tests-only ]] && test_pattern='*_cuda_test' benches=(train_step)
[[ -n ${2:-} && ${2:-} != --gpu-tests-only ]] && { echo "bundle: unknown option ${2}" >&2; exit 2; }
command -v patchelf >/dev/null || { echo "bundle: patchelf is missing; run scripts/install-deps.sh" >&2; exit 1; }
[[ -x "$build_dir/kestrel" ]] || { echo "bundle: no $build_dir/kestrel; build first (scripts/build.sh)" >&2; exit 1; }
# The bundle leaves OpenCV videoio and highgui out (detect on videos, --view-img): their codec and
# GUI libraries would multiply its size. A build that links them is refused.
if [[ $(ldd "$build_dir/kestrel") =~ libopencv_(videoio|highgui) ]]; then  # no `| grep -q` (below)
  echo "bundle: $build_dir/kestrel links OpenCV videoio or highgui, which the bundle leaves out;" \
       "reconfigure with cmake -B $build_dir -DKESTREL_VIDEOIO=OFF -DKESTREL_HIGHGUI=OFF and rebuild" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bundle=$stage/kestrel
mkdir -p "$bundle/bin/tests" "$bundle/lib" "$bundle/models" "$out_dir"

cp "$build_dir/kestrel" "$bundle/bin/"
for b in "${benches[@]}"; do
  [[ -x "$build_dir/$b" ]] && cp "$build_dir/$b" "$bundle/bin/"
done
if [[ ${2:-} == --gpu-tests-only && -x "$build_dir/cuda_tests" ]]; then
  cp "$build_dir/cuda_tests" "$bundle/bin/tests/"  # every *_cuda_test.cpp in one binary
else
  find "$build_dir" -maxdepth 1 -type f -name "$test_pattern" -perm -u+x -exec cp {} "$bundle/bin/tests/" \;
fi
cp "$root"/models/*.yaml "$bundle/models/"
mkdir -p "$bundle/data/hyps" && cp "$root"/data/*.yaml "$bundle/data/" && cp "$root"/data/hyps/*.yaml "$bundle/data/hyps/"
cp "$root/scripts/run-gpu-suite.sh" "$bundle/"
mkdir -p "$bundle/bench/pytorch" "$bundle/bench/epoch"
cp "$root"/bench/pytorch/*.py "$bundle/bench/pytorch/"
cp "$root/bench/epoch/run_reference.py" "$bundle/bench/epoch/"
[[ -f "$root/tests/slow.txt" ]] && cp "$root/tests/slow.txt" "$bundle/"

# Libraries the bundle must not carry: the base system and the CUDA install.
excluded='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcudnn[a-z_]*\.so|libnccl\.so|libnvrtc|libnvJitLink)'
binaries=("$bundle"/bin/* "$bundle"/bin/tests/*)
for bin in "${binaries[@]}"; do
  [[ -f "$bin" ]] || continue
  ldd "$bin" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $excluded ]] && continue
    [[ "$path" == "not" || -z "$path" ]] && { echo "bundle: $bin needs $name, not found" >&2; exit 1; }
    [[ -f "$bundle/lib/$name" ]] || cp -L "$path" "$bundle/lib/$name"
  done
done

# OpenCV links the BLAS and LAPACK interfaces (libblas.so.3, liblapack.so.3); Debian's OpenBLAS
# ships them as separate libraries (7 MiB for LAPACK) whose every symbol libopenblas.so.0 also
# exports. Where that holds, the bundle carries OpenBLAS once and the two names link to it.
if [[ -f "$bundle/lib/libopenblas.so.0" ]]; then
  exported() { nm -D --defined-only "$1" | awk '$2 ~ /^[TWDBRV]$/ {print $3}' | sort -u; }
  exported "$bundle/lib/libopenblas.so.0" >"$stage/openblas.symbols"
  for name in libblas.so.3 liblapack.so.3; do
    [[ -f "$bundle/lib/$name" && ! -L "$bundle/lib/$name" ]] || continue
    if [[ -z $(exported "$bundle/lib/$name" | comm -23 - "$stage/openblas.symbols") ]]; then
      ln -sf libopenblas.so.0 "$bundle/lib/$name"
    fi
  done
fi

# A library copied with its symbol table loses it (oneDNN's wheel ships libdnnl unstripped: 10 MiB,
# 0.8 MiB of the packed bundle); its dynamic symbols, all that loading and linking need, stay.
# (readelf's whole output is read before it is searched: `readelf | grep -q` under pipefail failed
# whenever grep quit before readelf had written all, and the library then travelled unstripped,
# 0.7 MiB more of the packed bundle on some runs and not others.)
for lib in "$bundle"/lib/*; do
  if [[ ! -L "$lib" ]] && [[ $(readelf -S "$lib") == *' .symtab '* ]]; then strip --strip-unneeded "$lib"; fi
done

for bin in "$bundle"/bin/*; do
  [[ -f "$bin" ]] && patchelf --set-rpath '$ORIGIN/../lib' "$bin"
done
for bin in "$bundle"/bin/tests/*; do patchelf --set-rpath '$ORIGIN/../../lib' "$bin"; done
for lib in "$bundle"/lib/*; do [[ -L "$lib" ]] || patchelf --set-rpath '$ORIGIN' "$lib"; done
find "$bundle/bin" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true

archive="$out_dir/kestrel-bundle.tar.xz"
# xz's x86 filter makes relative call addresses absolute first: 5 % smaller for these binaries. A
# 256 MiB dictionary spans the whole tarball, so the test binaries' common code is stored once
# (0.9 MiB smaller than preset 9's 64 MiB; one thread, 2.5 min, about 2.7 GiB of memory to pack,
# 256 MiB to unpack).
tar -C "$stage" -cf - kestrel | xz -T1 --x86 --lzma2=preset=9e,dict=256MiB > "$archive.tmp"
mv "$archive.tmp" "$archive"
echo "bundle: $archive ($(du -h "$archive" | cut -f1); $(ls "$bundle/lib" | wc -l) libraries, $(ls "$bundle/bin/tests" | wc -l) test binaries)"
