#!/usr/bin/env bash
# Real multi-process data parallelism against the simulation: epoch time of LeNet / Fashion-MNIST
# (batch 64) with the MPI backend on N processes and with the sim backend on N replicas, DDP and DP,
# interleaved in rounds; medians over epochs 2.. of each run, with the communication figures both
# backends log under the same names (comm_s, allreduce_s, broadcast_s, reduce_s, allgather_s).
# These are the measurements the overhead model is checked against.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
DATA=()
ROUNDS=2 EPOCHS=3 THREADS=2 NS="1 2" OUT="$ROOT/out/mpi-vs-sim"
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"
usage() { echo "usage: $(basename "$0") [--rounds R] [--epochs E>=2] [--threads T per machine] [--ns \"1 2\"] [--data DIR (Fashion-MNIST)] [--out DIR]"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        --epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        --threads) need_value "$@"; THREADS=$2; shift 2 ;;
        --ns) need_value "$@"; NS=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --data) need_value "$@"; need_dir --data "$2"; DATA=(--data "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
need_uint --threads "$THREADS" 1
need_uints --ns "$NS" 1
NS=${NS//,/ }
need_nonempty --out "$OUT"
need_dptrain
need_mpirun
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(train --epochs "$EPOCHS" --batch-size 64 --no-progress "${DATA[@]}")
for r in $(seq "$ROUNDS"); do
    for n in $NS; do
        per=$(( THREADS / n > 0 ? THREADS / n : 1 ))
        for mode in ddp dp; do
            mpirun --oversubscribe --bind-to none -np "$n" "$DPTRAIN" "${common[@]}" --backend mpi --mode "$mode" \
                --threads "$per" --log "$OUT/mpi-n$n-$mode-r$r.jsonl" > /dev/null
            "$DPTRAIN" "${common[@]}" --backend sim --replicas "$n" --mode "$mode" --threads "$THREADS" \
                --log "$OUT/sim-n$n-$mode-r$r.jsonl" > /dev/null
        done
    done
done
python3 - "$OUT" "$NS" <<'PY'
import glob, json, statistics, sys
out, ns = sys.argv[1], sys.argv[2].split()
print("| backend | N | mode | s/epoch (median) | compute_s | comm_s | allreduce_s | broadcast_s | reduce_s | allgather_s | test acc |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
rows = 0
for n in ns:
    for mode in ("ddp", "dp"):
        for be in ("mpi", "sim"):
            eps = []
            for f in sorted(glob.glob(f"{out}/{be}-n{n}-{mode}-r*.jsonl")):
                eps += [json.loads(l) for l in open(f) if '"event":"epoch"' in l][1:]
            if not eps:
                continue
            med = lambda k: statistics.median(e.get(k, 0.0) for e in eps)
            print(f"| {be} | {n} | {mode} | {med('seconds'):.2f} | {med('compute_s'):.2f} | {med('comm_s'):.3f} | "
                  f"{med('allreduce_s'):.3f} | {med('broadcast_s'):.3f} | {med('reduce_s'):.3f} | "
                  f"{med('allgather_s'):.3f} | {med('test_acc'):.4f} |")
            rows += 1
if not rows:
    sys.exit("mpi_vs_sim.sh: nothing was measured: no run logged an epoch after the first (see %s)" % out)
PY
echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%d); mpirun $(mpirun --version | head -1 | awk '{print $NF}')"
echo "command: examples/bench/mpi_vs_sim.sh --rounds $ROUNDS --epochs $EPOCHS --threads $THREADS --ns \"$NS\""
