#!/usr/bin/env bash
# The sim backend's own overhead: epoch time of LeNet / Fashion-MNIST at the same global batch with
# --replicas 1 and --replicas N (DDP and DP), interleaved in rounds, medians over epochs 2.. of every
# run; then the sim ring all-reduce's rate next to this machine's memory bandwidth (bench_allreduce),
# in the same run. Prints a markdown block for docs/results.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
BENCH_AR=${BENCH_AR:-$ROOT/build/bench_allreduce}
ROUNDS=3 EPOCHS=3 THREADS=2 REPLICAS=4 OUT="$ROOT/out/sim-overhead"
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"

usage() {
    echo "usage: $(basename "$0") [--rounds R] [--epochs E (>=2)] [--threads T] [--replicas N] [--out DIR]"
    echo "  DPTRAIN, BENCH_AR: the binaries (default build/dptrain, build/bench_allreduce)"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        --epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        --threads) need_value "$@"; THREADS=$2; shift 2 ;;
        --replicas) need_value "$@"; REPLICAS=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
need_uint --threads "$THREADS" 1
need_uint --replicas "$REPLICAS" 1
need_nonempty --out "$OUT"
need_built dptrain "$DPTRAIN" "(cmake -S . -B build && cmake --build build)"
need_built bench_allreduce "$BENCH_AR"
mkdir -p "$OUT"

configs=("1 ddp" "$REPLICAS ddp" "$REPLICAS dp")
for r in $(seq "$ROUNDS"); do
    for c in "${configs[@]}"; do
        set -- $c
        log="$OUT/r$1-$2-round$r.jsonl"
        "$DPTRAIN" train --epochs "$EPOCHS" --threads "$THREADS" --replicas "$1" --mode "$2" --no-progress \
            --log "$log" > /dev/null
    done
done

python3 - "$OUT" "$ROUNDS" "$REPLICAS" "${configs[@]}" <<'PY'
import json, statistics, sys, glob
out, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
configs = sys.argv[4:]
med = {}
for c in configs:
    reps, mode = c.split()
    secs, comm = [], []
    for f in sorted(glob.glob(f"{out}/r{reps}-{mode}-round*.jsonl")):
        ep = [json.loads(l) for l in open(f) if '"event":"epoch"' in l]
        secs += [e["seconds"] for e in ep[1:]]
        comm += [e.get("comm_s", 0) for e in ep[1:]]
    if not secs:
        sys.exit(f"sim_overhead.sh: nothing was measured: --replicas {reps} --mode {mode} logged no epoch after the first")
    med[c] = statistics.median(secs)
    print(f"| {reps} | {mode} | {med[c]:.2f} | {min(secs):.2f} | {max(secs):.2f} | {statistics.median(comm):.3f} | {med[c] / med[configs[0]]:.3f} |")
PY
echo
"$BENCH_AR" --replicas "$REPLICAS" --threads "$THREADS"
"$BENCH_AR" --replicas "$REPLICAS" --threads "$THREADS" --floats 4000000 --reps 10
echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%d)"
echo "command: examples/bench/sim_overhead.sh --rounds $ROUNDS --epochs $EPOCHS --threads $THREADS --replicas $REPLICAS"
