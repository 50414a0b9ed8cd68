#!/usr/bin/env bash
# record_profiles.sh: the overhead model's compute profiles of this machine's GPU, one per model,
# to ship next to the presets (issue #9): sim/presets/<device>-<model>.profile, which
# `--compute <device>` finds for that model. Each node's forward and backward are timed with CUDA
# events (sim/profile_run.c); synthetic data, so no data set is needed. Rows: the batches a
# device runs when a global batch of 64 (LeNet) or 256 (ResNet-18) is split over 1, 2, 4, 8 GPUs.
#   examples/gpu/record_profiles.sh [--device-name h100] [--build build-gpu] [--out sim/presets]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NAME=h100 BUILD="$ROOT/build-gpu" out="$ROOT/sim/presets"
. "$ROOT/examples/lib/args.sh"
while [ $# -gt 0 ]; do
    case "$1" in
        --device-name) need_value "$@"; NAME=$2; shift 2 ;;
        --build) need_value "$@"; BUILD=$2; shift 2 ;;
        --out) need_value "$@"; out=$2; shift 2 ;;
        -h|--help) sed -n 2,8p "$0"; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
# the name becomes a file name in sim/presets/ (or --out) and what --compute NAME looks for
[[ $NAME =~ ^[a-z0-9][a-z0-9_.-]{0,39}$ ]] || die_usage "--device-name: expected lower-case letters, digits, '.', '_' or '-' (at most 40), got '$NAME'"
need_nonempty --build "$BUILD"
need_nonempty --out "$out"
D="$BUILD/dptrain"
[ -x "$D" ] || { echo "$(basename "$0"): no dptrain at $D: build with -DDP_WITH_CUDA=ON first" >&2; exit 1; }
mkdir -p "$out" || exit 1
# a GPU topology (nvlink4) asks for the rows of batch B / N for N = 1, 2, 4, 8, one worker each
"$D" predict --device cuda --model lenet --dataset synthetic --shape 1x28x28 --samples 6400 --batch-size 64 \
    --topology nvlink4 --save-profile "$out/$NAME-lenet.profile"
"$D" predict --device cuda --model resnet18 --dataset synthetic --shape 3x224x224 --samples 512 --batch-size 256 \
    --topology nvlink4 --save-profile "$out/$NAME-resnet18.profile"
for m in lenet resnet18; do
    sed -i "1a # recorded by examples/gpu/record_profiles.sh on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(date -u '+%Y-%m-%d %H:%M UTC')" \
        "$out/$NAME-$m.profile"
    echo "wrote $out/$NAME-$m.profile"
done
# the model with them: LeNet on 8 H100s, DP and DDP
"$D" predict --model lenet --dataset synthetic --shape 1x28x28 --samples 6400 --batch-size 64 \
    --topology nvlink4,pcie4 --compute "$out/$NAME-lenet.profile"
