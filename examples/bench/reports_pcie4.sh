#!/usr/bin/env bash
# The users' reports (issue #9) reproduced by the overhead model with the pcie4 preset (RTX 4090
# class, no P2P): LeNet / MNIST-shaped data on 1, 2, 4, 8 GPUs, DP and DDP. No GPU profile ships
# yet, so the GPU compute is an ASSUMPTION derived from this CPU's measured profile: each node
# takes its kernels x FLOOR_US (a LeNet-sized kernel finishes in a few microseconds) plus the CPU
# time / RATIO; the trainer's CPU step overhead is dropped. Replace it with a profile recorded on a
# GPU (dptrain ... --save-profile) when one exists. Prints the predictions and writes an SVG.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
RATIO=20 FLOOR_US=3 OUT="$ROOT/out/reports-pcie4" PLOT="" BATCHES="64 256"
. "$ROOT/examples/lib/args.sh"
usage() { echo "usage: $(basename "$0") [--ratio R] [--floor-us F] [--batches \"64 256\"] [--plot FILE.svg] [--out DIR]"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --ratio) need_value "$@"; RATIO=$2; shift 2 ;;
        --floor-us) need_value "$@"; FLOOR_US=$2; shift 2 ;;
        --batches) need_value "$@"; BATCHES=$2; shift 2 ;;
        --plot) need_value "$@"; need_nonempty --plot "$2"; PLOT=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_number --ratio "$RATIO" 0+
need_number --floor-us "$FLOOR_US" 0
need_uints --batches "$BATCHES" 1
BATCHES=${BATCHES//,/ }
need_nonempty --out "$OUT"
[ -x "$DPTRAIN" ] || { echo "$(basename "$0"): no dptrain at $DPTRAIN: build first" >&2; exit 1; }
mkdir -p "$OUT"
for b in $BATCHES; do
    "$DPTRAIN" predict --batch-size "$b" --threads 1 --topology pcie4 --save-profile "$OUT/cpu-b$b.profile" > /dev/null
    python3 - "$OUT/cpu-b$b.profile" "$OUT/assumed-gpu-b$b.profile" "$RATIO" "$FLOOR_US" <<'PY'
import sys
src, dst, ratio, floor = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]) * 1e-6
kf, kb, out = {}, {}, []
for line in open(src):
    w = line.split()
    if w and w[0] == "node":
        kf[int(w[1])], kb[int(w[1])] = int(w[3]), int(w[4])
    if w and w[0] == "device":
        line = "device assumed-gpu\n"
    elif w and w[0] == "overhead":   # the CPU trainer's overhead: not a GPU's
        continue
    elif w and w[0] == "row":   # loss: one kernel; SGD: one fused kernel per tensor group, say 2
        line = f"row {w[1]} {w[2]} {w[3]} {floor + float(w[4]) / ratio:.6e} {2 * floor + float(w[5]) / ratio:.6e}\n"
    elif w and w[0] == "time":
        i = int(w[1])
        line = f"time {i} {kf[i] * floor + float(w[2]) / ratio:.6e} {kb[i] * floor + float(w[3]) / ratio:.6e}\n"
    out.append(line)
open(dst, "w").write("# ASSUMED GPU compute: CPU profile / %g + %g us per kernel (examples/bench/reports_pcie4.sh)\n"
                     % (ratio, floor * 1e6) + "".join(out))
PY
    plot=()
    [ -n "$PLOT" ] && plot=(--plot "${PLOT%.svg}-b$b.svg")
    "$DPTRAIN" predict --batch-size "$b" --threads 1 --topology pcie4 --compute "$OUT/assumed-gpu-b$b.profile" \
        --log "$OUT/predict-b$b.jsonl" "${plot[@]}"
    echo
done
echo "machine (for the CPU profile): $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%d)"
echo "command: examples/bench/reports_pcie4.sh --ratio $RATIO --floor-us $FLOOR_US --batches \"$BATCHES\"${PLOT:+ --plot $PLOT}"
