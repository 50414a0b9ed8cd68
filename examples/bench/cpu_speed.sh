#!/usr/bin/env bash
# dptrain's CPU speed in one run: the machine's FLOP limit, dptrain, an older dptrain built in the same
# run, PyTorch 2.x, PyTorch 1.13 and JAX, interleaved round by round. The work is done by cpu_speed.py
# (Python standard library only); this wrapper finds a python3 for it.
#
# ---- help
# Usage: examples/bench/cpu_speed.sh [options]
#
# Sections (--sections, default all four):
#   lenet    LeNet / Fashion-MNIST epochs at batch 64 on T threads: dptrain (this build), dptrain at
#            --base built here, PyTorch 2.x, PyTorch 1.13 and JAX, each round all of them in turn after
#            bench_sgemm, which measures OpenBLAS's best sgemm rate on T threads (1024^3 and LeNet's GEMM
#            shapes): "the limit". Prints s/epoch, median (min-max) of epochs 2.. of every round, and
#            the ratio epoch / (LeNet's training FLOPs per epoch, counted from the model / the limit).
#            Before the rounds each PyTorch tries a few settings (oneDNN or not, channels_last, the
#            OpenMP spin bound, torch.compile on 2.x), 2 epochs each, and keeps the fastest.
#   resnet   ResNet-18 step time, batch 32, synthetic 3x224x224: dptrain, --base, the PyTorches (their
#            fastest of oneDNN / channels_last / native convolutions).
#   threads  dptrain --threads 1 against --threads T (2 if T is 1): LeNet, LeNet-BN and a small ResNet-18.
#   shapes   LeNet on T cores as P processes x T/P threads for every P dividing T (mpirun --backend mpi;
#            P = 1: one process, --backend sim), each against the best shape.
#
# Options:
#   -r, --rounds R        LeNet rounds (default 5)
#   -e, --epochs E        epochs per LeNet run (default 3; epoch 1 is dropped)
#   -t, --threads T       threads for every program (default 2)
#       --base COMMIT     the older dptrain to compare with, built in OUT with its own defaults (default
#                         a12b3f7; none: skip)
#       --base-bin BIN    use this binary as --base instead of building it
#       --peers LIST      of torch2, torch1, jax, or none (default all; a peer that is not installed is reported so)
#       --install         install the missing PyTorch 2 (tests/torch2_env.sh) and JAX from PyPI into out/
#       --resnet-steps S  timed steps per ResNet-18 run (default 3, after one warm-up step)
#       --resnet-rounds R, --threads-rounds R   rounds of those sections (default 3 each; shapes: --threads-rounds)
#       --no-tune         the PyTorches' default settings, no trials
#       --data DIR        Fashion-MNIST (default /usr/share/datasets/fashion-mnist)
#       --out DIR         logs and cpu_speed.md (default out/cpu-speed)
#       --wait-idle S     before each run, wait up to S seconds for the machine to be idle
#       --keep-openblas-coretype   keep an OPENBLAS_CORETYPE of the environment (by default it is removed
#                         from every run, so that OpenBLAS picks its kernels for the CPU itself; the
#                         limit is then the best of both)
#   -h, --help            this text
#
# Environment: DPTRAIN (default build/dptrain), BENCH_SGEMM (default bench_sgemm beside it),
# TORCH2_PYTHON (default out/torch2/bin/python), TORCH1_PYTHON (default /usr/bin/python3),
# JAX_PYTHON (default out/jax/bin/python).
#
# Example: examples/bench/cpu_speed.sh --rounds 5 --threads 2 --install
# ---- end of help
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for py in ${CPU_SPEED_PYTHON:-} /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null 2>&1; then exec "$py" "$ROOT/examples/bench/cpu_speed.py" "$@"; fi
done
echo "cpu_speed.sh: no python3 found (apt-get install python3)" >&2
exit 1
