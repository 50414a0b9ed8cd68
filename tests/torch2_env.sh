#!/usr/bin/env bash
# A Python with PyTorch 2 for tests/test_torchrun.c's real torchrun (Debian's torch 1.13 torchrun
# dies on Python 3.11 before it starts a worker). Usage:
#   DP_TORCH_PYTHON=$(bash tests/torch2_env.sh build/torch2) ctest --test-dir build -R torchrun
# Creates a venv at $1 (default build/torch2) from PyPI, about 1 GB of downloads and 2 GB on disk
# once: PyPI's Linux wheel is the CUDA build, so its NVIDIA libraries come too (without them
# `import torch` fails), installed --no-deps to leave out the CUDA toolkit wheels a CPU run never
# loads. Prints the venv's python. Versions pinned to the ones tried (torch 2.15.0, CUDA 13 wheels).
set -euo pipefail
dir=${1:-build/torch2}
if ! "$dir/bin/python" -c 'import torch.distributed.run' >/dev/null 2>&1; then
    python3 -m venv "$dir" >&2
    "$dir/bin/pip" install --quiet --no-deps torch==2.15.0 nvidia-nccl-cu13==2.30.7 nvidia-cusparselt-cu13==0.8.1 \
        nvidia-nvshmem-cu13==3.7.2 nvidia-cufile >&2
    "$dir/bin/pip" install --quiet typing_extensions filelock sympy networkx jinja2 fsspec >&2
    "$dir/bin/python" -c 'import torch.distributed.run' >&2
fi
echo "$(cd "$dir" && pwd)/bin/python"
