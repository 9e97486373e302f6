#!/usr/bin/env bash
# Installs the anchors of docs/history/performance.md ("Anchors"): what the reference (YOLOv5 v7.0) needs
# to run its training step on PyPI's newest PyTorch, and ONNX Runtime (CPU) for `kestrel export`'s
# ONNX. Not run by CI; run it before bench/anchors/compare_anchors.sh. Idempotent: packages
# already at the pinned version are left alone, and it says what it did.
#
#   KESTREL_BENCH_VENV  where the venv goes (default /opt/kestrel-bench)
#   KESTREL_TORCH_VENV  the torch venv of scripts/install-torch-venv.sh (default /opt/kestrel-torch);
#                       made first if it is missing
#   KESTREL_PYTHON_FOR_VENV  the interpreter (default python3: pyenv's 3.11, as the torch venv)
#
# Layout: a venv of its own that sees the torch venv's packages through a .pth file, so torch
# (2 GB) is installed once and the torch venv that CI's torchrun test uses is never modified.
# The bench venv's own site-packages come first on sys.path, so nothing here can shadow torch's
# own dependencies unexpectedly: numpy is not installed here (the torch venv's is used).
# Everything is installed with --no-deps: torchvision's dependency list would pull a second torch
# and its CUDA wheels; the others' dependencies are listed explicitly below.
set -euo pipefail
venv=${KESTREL_BENCH_VENV:-/opt/kestrel-bench}
torch_venv=${KESTREL_TORCH_VENV:-/opt/kestrel-torch}
python=${KESTREL_PYTHON_FOR_VENV:-python3}
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# torchvision 0.29.2 is the newest on PyPI and requires torch >= 2.14 (its extension uses
# torch's stable ABI), so it matches install-torch-venv.sh's torch 2.15.0.
packages=(
  torchvision==0.29.2 onnxruntime==1.32.0
  opencv-python-headless pandas matplotlib seaborn pyyaml tqdm psutil requests pillow scipy
  packaging pycocotools==2.0.11
  # dependencies of the above, as --no-deps skips them
  python-dateutil six tzdata pytz contourpy cycler fonttools kiwisolver pyparsing
  charset-normalizer idna urllib3 certifi flatbuffers protobuf coloredlogs humanfriendly
)

start=$SECONDS
if ! env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" "$torch_venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "install-bench-venv: no torch in $torch_venv; running install-torch-venv.sh first"
  KESTREL_TORCH_VENV=$torch_venv "$here/install-torch-venv.sh"
fi
if [[ ! -x $venv/bin/python ]]; then
  echo "install-bench-venv: making $venv with $($python --version 2>&1)"
  "$python" -m venv "$venv"
else
  echo "install-bench-venv: $venv exists"
fi
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
torch_site=$("$torch_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [[ $(cat "$site/kestrel-torch.pth" 2>/dev/null) != "$torch_site" ]]; then
  echo "$torch_site" > "$site/kestrel-torch.pth"
  echo "install-bench-venv: torch comes from $torch_site (kestrel-torch.pth)"
fi

# Which of the requested packages are missing or at another version (pip would reinstall a
# pinned one, and --upgrade-strategy cannot be used with --no-deps).
mapfile -t missing < <("$venv/bin/python" - "${packages[@]}" <<'EOF'
import sys
from importlib import metadata
for spec in sys.argv[1:]:
    name, _, version = spec.partition("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        print(spec)
        continue
    if version and have.split("+")[0] != version:
        print(spec)
EOF
)
if ((${#missing[@]})); then
  echo "install-bench-venv: installing ${missing[*]}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-compile "${missing[@]}"
else
  echo "install-bench-venv: all ${#packages[@]} packages present"
fi

"$venv/bin/python" - <<'EOF'
import cv2, matplotlib, numpy, onnxruntime, pandas, seaborn, torch, torchvision, yaml
print(f"install-bench-venv: torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"onnxruntime {onnxruntime.__version__} ({', '.join(onnxruntime.get_available_providers())}), "
      f"numpy {numpy.__version__}, opencv {cv2.__version__}, pandas {pandas.__version__}")
EOF
echo "install-bench-venv: done in $((SECONDS - start)) s; python is $venv/bin/python"
