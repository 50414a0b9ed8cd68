#!/usr/bin/env bash
# The overhead model checked against measurement (issue #9): calibrates this machine's MPI
# all-reduce into a `host` topology, then in rounds predicts (dptrain predict: a short timing
# run of the model here + the model) and measures (mpirun -np N dptrain --backend mpi) every
# multi-device configuration the machine can run: MPI with 1 and 2 processes, DDP and DP,
# LeNet / Fashion-MNIST, global batch 64, the machine's cores split over the processes.
# Prints predicted and measured epoch times (medians) and the error; targets 10% DDP, 15% DP.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
ROUNDS=3 EPOCHS=3 THREADS=2 NS="1 2" OUT="$ROOT/out/predict-vs-measured" TOPO=""
usage() { echo "usage: $(basename "$0") [--rounds R] [--epochs E>=2] [--threads T] [--ns \"1 2\"] [--topology FILE (skip calibration)] [--out DIR]"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --epochs) EPOCHS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --ns) NS=$2; shift 2 ;;
        --topology) TOPO=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "$(basename "$0"): unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
[ -x "$DPTRAIN" ] || { echo "$(basename "$0"): no dptrain at $DPTRAIN: build first" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "$(basename "$0"): mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
[ "$EPOCHS" -ge 2 ] || { echo "$(basename "$0"): --epochs must be at least 2 (the first is dropped)" >&2; exit 2; }
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
if [ -z "$TOPO" ]; then
    TOPO="$OUT/host"
    "${MPIRUN[@]}" -np 2 "$DPTRAIN" calibrate --backend mpi --threads 1 --out "$TOPO" | tee "$OUT/calibrate.txt"
fi
common=(--epochs "$EPOCHS" --batch-size 64 --no-progress)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# each measurement right after its own prediction: on a shared machine the load drifts
for r in $(seq "$ROUNDS"); do
    for n in $NS; do
        per=$(( THREADS / n > 0 ? THREADS / n : 1 ))
        for mode in ddp dp; do
            "$DPTRAIN" predict --batch-size 64 --threads "$THREADS" --topology "$TOPO" \
                --log "$OUT/predict-n$n-$mode-r$r.jsonl" --save-profile "$OUT/profile-n$n-$mode-r$r" > /dev/null
            "${MPIRUN[@]}" -np "$n" "$DPTRAIN" train "${common[@]}" --backend mpi --mode "$mode" --threads "$per" \
                --log "$OUT/mpi-n$n-$mode-r$r.jsonl" > /dev/null
        done
    done
done
python3 - "$OUT" "$NS" <<'PY'
import glob, json, statistics, sys
out, ns = sys.argv[1], sys.argv[2].split()
pred = {}
for n in ns:
    for mode in ("ddp", "dp"):
        for f in sorted(glob.glob(f"{out}/predict-n{n}-{mode}-r*.jsonl")):
            for l in open(f):
                e = json.loads(l)
                if e.get("event") == "predict" and e["mode"] == mode and e["devices"] == int(n):
                    pred.setdefault((mode, int(n)), []).append(e)
print("| N | mode | predicted s/epoch | measured s/epoch | error | measured typical epoch (median step x steps) | error | predicted ms/step: compute / exposed comm / DP serial / host | measured comm_s/epoch | target |")
print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
for n in ns:
    for mode in ("ddp", "dp"):
        eps, steps, nsteps = [], [], []
        for f in sorted(glob.glob(f"{out}/mpi-n{n}-{mode}-r*.jsonl")):
            ev = [json.loads(l) for l in open(f)]
            eps += [e for e in ev if e.get("event") == "epoch"][1:]
            st = [e for e in ev if e.get("event") == "step" and e["epoch"] > 1]
            steps += [e["seconds"] for e in st if "seconds" in e]
            nsteps += [sum(1 for e in ev if e.get("event") == "step" and e["epoch"] == 1)]
        p = pred.get((mode, int(n)), [])
        if not eps or not p:
            continue
        meas = statistics.median(e["seconds"] for e in eps)
        typ = statistics.median(steps) * statistics.median(nsteps) if steps else float("nan")
        comm = statistics.median(e.get("comm_s", 0) for e in eps)
        pe = statistics.median(x["epoch_s"] for x in p)
        med = lambda k: 1e3 * statistics.median(x[k] for x in p)
        err, err2 = (pe - meas) / meas, (pe - typ) / typ
        target = 0.10 if mode == "ddp" else 0.15
        print(f"| {n} | {mode} | {pe:.2f} | {meas:.2f} | {100*err:+.1f}% | {typ:.2f} | {100*err2:+.1f}% | "
              f"{med('compute_s'):.3f} / {med('exposed_comm_s'):.3f} / {med('serial_s'):.3f} / {med('host_s'):.3f} | "
              f"{comm:.3f} | {'within' if abs(err) <= target else 'OUTSIDE'} {int(100*target)}% |")
PY
echo
echo "load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg) (other users of the machine)"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%Y-%m-%d); mpirun $(mpirun --version | head -1 | awk '{print $NF}')"
echo "command: examples/bench/predict_vs_measured.sh --rounds $ROUNDS --epochs $EPOCHS --threads $THREADS --ns \"$NS\""
