#!/usr/bin/env bash
# What the canonical summation order costs: epoch time of LeNet / Fashion-MNIST (batch 64) and
# the step time of ResNet-18 (synthetic 3x224x224, batch 32, a few steps) of this build against
# another build (BASE, e.g. the commit before the change, built elsewhere), interleaved in
# rounds on the same machine; medians and the ratio. Prints a markdown block for docs/results.md.
#   BASE=/path/to/old/build/dptrain examples/bench/determinism_cost.sh [--rounds R] [--threads T]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
BASE=${BASE:-}
ROUNDS=3 THREADS=2 RESNET_STEPS=3 OUT="$ROOT/out/determinism-cost"
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"

usage() {
    echo "usage: BASE=OLD_DPTRAIN $(basename "$0") [--rounds R] [--threads T] [--resnet-steps S] [--out DIR]"
    echo "  DPTRAIN: this build (default build/dptrain); BASE: the build to compare with (required)"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        --threads) need_value "$@"; THREADS=$2; shift 2 ;;
        --resnet-steps) need_value "$@"; RESNET_STEPS=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --threads "$THREADS" 1
need_uint --resnet-steps "$RESNET_STEPS" 1
need_nonempty --out "$OUT"
[ -n "$BASE" ] && [ -x "$BASE" ] || die_usage "BASE: '$BASE' is not an executable; set BASE to the dptrain binary to compare with"
need_dptrain
mkdir -p "$OUT"
rm -f "$OUT"/lenet-base.txt "$OUT"/lenet-this.txt "$OUT"/resnet-base.txt "$OUT"/resnet-this.txt

# seconds of epoch 2 (LeNet) or seconds per step of the one epoch (ResNet-18) from a --log file
field() { sed -n 's/.*"event":"epoch".*"steps":\([0-9]*\).*"seconds":\([0-9.]*\).*/\1 \2/p' "$1"; }

lenet() { "$1" train --epochs 2 --threads "$THREADS" --quiet --log "$2" && field "$2" | tail -1 | cut -d' ' -f2; }
resnet() {
    "$1" train --model resnet18 --dataset synthetic --shape 3x224x224 --samples 256 --batch-size 32 \
        --epochs 1 --max-steps "$RESNET_STEPS" --lr 0.02 --momentum 0.9 --weight-decay 1e-4 --nesterov \
        --threads "$THREADS" --quiet --log "$2" && field "$2" | awk '{printf "%.4f\n", $2 / $1}'
}

for r in $(seq "$ROUNDS"); do
    for which in base this; do
        bin=$BASE; [ "$which" = this ] && bin=$DPTRAIN
        lenet "$bin" "$OUT/lenet-$which-$r.jsonl" >> "$OUT/lenet-$which.txt"
        resnet "$bin" "$OUT/resnet-$which-$r.jsonl" >> "$OUT/resnet-$which.txt"
    done
done
for f in "$OUT"/lenet-base.txt "$OUT"/lenet-this.txt "$OUT"/resnet-base.txt "$OUT"/resnet-this.txt; do
    grep -q '[0-9]' "$f" 2>/dev/null || nothing_measured "$f holds no time (the runs logged no epoch; see $OUT/*.jsonl)"
done
median() { sort -g "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "Determinism cost, $(date -u +%Y-%m-%d), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $THREADS threads, $ROUNDS rounds interleaved"
echo
echo "| workload | base (median, min-max) | this build | this / base |"
echo "|---|---|---|---|"
for w in lenet resnet; do
    b=$(median "$OUT/$w-base.txt"); t=$(median "$OUT/$w-this.txt")
    unit="s/epoch"; [ $w = resnet ] && unit="s/step"
    echo "| $([ $w = lenet ] && echo 'LeNet / Fashion-MNIST, epoch 2' || echo "ResNet-18, batch 32, $RESNET_STEPS steps") | $b $unit ($(sort -g "$OUT/$w-base.txt" | head -1)-$(sort -g "$OUT/$w-base.txt" | tail -1)) | $t ($(sort -g "$OUT/$w-this.txt" | head -1)-$(sort -g "$OUT/$w-this.txt" | tail -1)) | $(awk -v a="$t" -v b="$b" 'BEGIN {printf "%.3f", a / b}') |"
done
