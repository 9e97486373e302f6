#!/usr/bin/env bash
# Prepares the first-GPU run on this (CPU) machine: builds what the GPU machine runs, bundles it
# without the CPU-only tests, and stages everything the run needs in .gpu/ (ignored by git), which
# the device tool carries:
#
#   .gpu/kestrel-bundle.tar.xz   kestrel, train_step, bench_kernels, overlap, cuda_tests (every CUDA test),
#                                models, hyps, run-gpu-suite.sh, the reference-side bench scripts
#   .gpu/yolov5.tar.xz           the reference's source at v7.0 (run there, never committed),
#                                packed: unpacked it is twice the size, and every MiB counts
#   .gpu/coco128/                the shared coco128 (labels, and the images re-encoded at quality 55)
#
#   scripts/prepare-gpu-run.sh --reference-git GIT_DIR | --reference DIR [--coco128 DIR]
#
# --reference-git is a clone of ultralytics/yolov5 holding the v7.0 tag (e.g. the library's fetch
# mirror); --reference a checkout of v7.0. --coco128 defaults to ../shared/datasets/coco128.
# What travels (the working tree and .gpu) must stay under the device tool's 64 MiB; the bundle
# under 30 MiB. The script checks both in bytes (leaving half a MiB spare) and prints the device command
# (docs/history/performance.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# A build of its own: the bundle leaves OpenCV's videoio out (its FFmpeg would not fit the travel),
# which the default build links where install-deps put it.
build_dir=${BUILD_DIR:-$root/build-gpu}
stage=$root/.gpu
ref_git="" ref_dir="" coco128=$root/../shared/datasets/coco128
while (($#)); do
  case $1 in
    --reference-git) ref_git=$2; shift 2 ;;
    --reference) ref_dir=$2; shift 2 ;;
    --coco128) coco128=$2; shift 2 ;;
    *) echo "prepare-gpu-run: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $ref_git || -n $ref_dir ]] || { echo "prepare-gpu-run: give --reference-git GIT_DIR or --reference DIR (YOLOv5 v7.0)" >&2; exit 2; }
[[ -f $coco128/coco128.yaml ]] || { echo "prepare-gpu-run: no coco128 at $coco128 (give --coco128 DIR)" >&2; exit 2; }

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKESTREL_VIDEOIO=OFF -DKESTREL_HIGHGUI=OFF >/dev/null
# The CUDA tests as one binary (cuda_tests): 37 separate ones repeated most of Kestrel's code, 7.5 of
# the bundle's MiB (issue 43, room to travel).
cmake --build "$build_dir" -j "$(nproc)" --target kestrel train_step bench_kernels overlap cuda_tests

rm -rf "$stage"
mkdir -p "$stage"
BUILD_DIR=$build_dir "$root/scripts/bundle.sh" "$stage" --gpu-tests-only
ref_tree=$(mktemp -d)
trap 'rm -rf "$ref_tree"' EXIT
if [[ -n $ref_git ]]; then
  git --git-dir "$ref_git" archive v7.0 | tar -x -C "$ref_tree"
else
  cp -r "$ref_dir"/. "$ref_tree"
  rm -rf "$ref_tree/.git"
fi
[[ -f $ref_tree/train.py && -f $ref_tree/models/yolo.py && -f $ref_tree/data/hyps/hyp.scratch-low.yaml ]] ||
  { echo "prepare-gpu-run: the reference given is not a YOLOv5 v7.0 tree" >&2; exit 1; }
# What the suite never runs stays behind: the sample images (0.6 MiB packed: the suite trains
# on coco128), the notebooks and GitHub's files.
rm -rf "$ref_tree/data/images" "$ref_tree/.github"
find "$ref_tree" -name '*.ipynb' -delete
tar -C "$ref_tree" -cf - . | xz -T0 -9 >"$stage/yolov5.tar.xz"
mkdir -p "$stage/coco128"
cp -r "$coco128/coco128.yaml" "$coco128/labels" "$stage/coco128/"
find "$stage/coco128" -name '*.cache' -delete
# The images re-encoded at JPEG quality 55 (same pixels' sizes and names): 21 MiB become about 4.5
# (5 at quality 60, 6.5 at 75), which the travel needs. The GPU suite's e2e step trains Kestrel and the
# reference on these same files, so the comparison stays like for like.
(cd "$coco128" && find images -type d) | while read -r d; do mkdir -p "$stage/coco128/$d"; done
(cd "$coco128" && find images -type f -name '*.jpg') | while read -r f; do
  djpeg "$coco128/$f" | cjpeg -quality 55 -optimize >"$stage/coco128/$f"
done

# Sizes in bytes as they travel (apparent sizes: du's disk blocks overstate a tree of small files
# by about a MiB); the check leaves half a MiB below the tool's 64.
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
bundle_bytes=$(stat -c %s "$stage/kestrel-bundle.tar.xz")
stage_bytes=$(du -sb "$stage" | cut -f1)
tree_bytes=$(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((tree_bytes + stage_bytes)) limit=$((127 * 1048576 / 2))
echo "prepare-gpu-run: bundle $(mib "$bundle_bytes") MiB (limit 30), .gpu $(mib "$stage_bytes") MiB, working tree $(mib "$tree_bytes") MiB: $(mib "$total") MiB travel (limit 64, checked at 63.5)"
((bundle_bytes <= 30 * 1048576 && total <= limit)) || { echo "prepare-gpu-run: too large to travel" >&2; exit 1; }
cat <<'EOF'
prepare-gpu-run: ready. On the GPU machine (device tool `run`, carry [".gpu"], timeout_s 570):
  mkdir -p /tmp/k /tmp/y && tar -xJf .gpu/kestrel-bundle.tar.xz -C /tmp/k && tar -xJf .gpu/yolov5.tar.xz -C /tmp/y && /tmp/k/kestrel/run-gpu-suite.sh --budget 480 --reference /tmp/y --coco128 .gpu/coco128
EOF
