#!/usr/bin/env bash
# Installs PyTorch from PyPI into a virtual environment outside the repository, for torchrun (the
# launcher test, tests/dist/launchers_test.cpp) and for running the reference's scripts on a
# current PyTorch. Debian's python3-torch 1.13 cannot serve: its torchrun dies on Python 3.11
# before it starts a worker. Idempotent: a venv whose `import torch` works is left as it is.
#
#   KESTREL_TORCH_VENV  where the venv goes (default /opt/kestrel-torch)
#   KESTREL_PYTHON_FOR_VENV  the interpreter that makes it (default python3: pyenv's 3.11)
#   CUDA_HOME           the CUDA 13 toolkit (default /usr/local/cuda)
#
# The smallest install that imports: the torch wheel without its dependency list (which would pull
# about 3 GB of CUDA wheels), the pure-Python packages `import torch` needs, and only the four CUDA
# libraries that libtorch_cuda.so links and the toolkit at $CUDA_HOME lacks or has too old
# (cuSPARSELt, NVSHMEM, cuFile, and NCCL, whose 2.30 symbols torch uses). cuBLAS, cuDNN, cuFFT,
# cuRAND, cuSOLVER, cuSPARSE, CUPTI, NVRTC and the runtime come from $CUDA_HOME/lib64: run torch
# with that directory on LD_LIBRARY_PATH (this machine's loader configuration already lists it).
# About 1.1 GB to download.
set -euo pipefail
venv=${KESTREL_TORCH_VENV:-/opt/kestrel-torch}
python=${KESTREL_PYTHON_FOR_VENV:-python3}
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
torch_version=2.15.0  # the newest on PyPI when this was written; its CUDA 13 wheel
check=(env "LD_LIBRARY_PATH=$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$venv/bin/python" -c
       "import torch; print('torch', torch.__version__, 'sum', float(torch.ones(3).sum()))")

if [[ -x $venv/bin/torchrun ]] && found=$("${check[@]}" 2>/dev/null); then
  echo "install-torch-venv: $venv already has $found"
  exit 0
fi
start=$SECONDS
echo "install-torch-venv: making $venv with $($python --version 2>&1)"
"$python" -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-compile)
"${pip[@]}" "torch==$torch_version"
# What torch's import needs (its Requires-Dist, less the CUDA wheels), and numpy for tensor <->
# array conversion.
"${pip[@]}" filelock typing-extensions setuptools sympy mpmath networkx jinja2 MarkupSafe fsspec numpy
# The CUDA libraries the toolkit does not supply, pinned as torch $torch_version pins them.
"${pip[@]}" nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7 \
  "nvidia-cufile==1.17.1.22.*"
"${check[@]}"
echo "install-torch-venv: done in $((SECONDS - start)) s; torchrun is $venv/bin/torchrun"
