#!/usr/bin/env bash
# transfer_check.sh: the roofline transfer from one GPU to another, checked on the GPU at hand. Its
# LeNet (1x28x28) and ResNet-18 (3x224x224) profiles are measured (record_profiles.sh --out) and
# compared row by row with the ones examples/reports/derive_profiles.py derives for this GPU from the
# shipped, H100-measured sim/presets/h100-{lenet,resnet18}.profile: the formula and the sources that
# make the shipped T4, RTX 3090 and RTX 4090 profiles (derive_profiles.py check).
# On an H200: the transfer H100 -> H200 (same FP32 peak, 43 % more memory bandwidth). On an H100:
# H100 -> H100, no transfer at all: the spread between the shipped profiles and this H100's today,
# the least error any transfer check can show.
#   examples/gpu/transfer_check.sh [--build build-gpu] [--out out/transfer]
# Writes DIR/profiles/<gpu>-{lenet,resnet18}.profile, DIR/transfer-{lenet,resnet18}.{md,json}.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CALLER=$PWD
PROG=$(basename "$0")
BUILD=$ROOT/build-gpu OUT=$ROOT/out/transfer
. "$ROOT/examples/lib/args.sh"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) need_value "$@"; BUILD=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        -h|--help) sed -n 2,11p "$0"; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_nonempty --build "$BUILD"
need_nonempty --out "$OUT"
[[ $BUILD == /* ]] || BUILD=$CALLER/$BUILD
[[ $OUT == /* ]] || OUT=$CALLER/$OUT
command -v nvidia-smi > /dev/null 2>&1 || nothing_measured "no GPU visible (no nvidia-smi on PATH)"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) || gpu=
# the spec of this GPU (sim/presets/<spec>.spec): the transfer's target
case "$gpu" in
    *H200*) spec=h200 ;;
    *H100*) spec=h100 ;;
    "") nothing_measured "no GPU visible (nvidia-smi lists none)" ;;
    *) nothing_measured "no spec for '$gpu' in sim/presets/ (write sim/presets/NAME.spec as h200.spec is written, and add it here)" ;;
esac
mkdir -p "$OUT/profiles"
"$ROOT/examples/gpu/record_profiles.sh" --device-name "$spec" --build "$BUILD" --out "$OUT/profiles"
for m in lenet resnet18; do
    python3 "$ROOT/examples/reports/derive_profiles.py" check --source "$ROOT/sim/presets/h100-$m.profile" \
        --from h100 --to "$spec" --measured "$OUT/profiles/$spec-$m.profile" \
        --markdown "$OUT/transfer-$m.md" --json "$OUT/transfer-$m.json"
done
echo "$PROG: $gpu, $(date -u '+%Y-%m-%d %H:%M UTC'): $OUT/transfer-{lenet,resnet18}.md"
