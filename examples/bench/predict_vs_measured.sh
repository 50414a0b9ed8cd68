#!/usr/bin/env bash
# The overhead model checked against measurement (issue #9): calibrates this machine's MPI
# collectives into a `host` topology (each round, with the N processes predicted for), then
# predicts (dptrain predict: a short timing run of the model here + the model) and measures (mpirun -np N dptrain --backend mpi) every
# multi-device configuration the machine can run: MPI with 1 and 2 processes (1..16 with
# --ns on a machine with the cores), DDP and DP,
# LeNet / Fashion-MNIST, global batch 64, the machine's cores split over the processes.
# Prints predicted and measured epoch times (medians over rounds) and their error, the targets
# (10% DDP, 15% DP) judged on it; and each round's prediction against that round's measurement, whose
# spread shows how much a single pair moves on this machine.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
ROUNDS=5 EPOCHS=3 THREADS=2 NS="1 2" OUT="$ROOT/out/predict-vs-measured" TOPO="" REPORT_ONLY=0 NS_SET=0
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"
usage() { echo "usage: $(basename "$0") [--rounds R] [--epochs E>=2] [--threads T] [--ns \"1 2\"] [--topology FILE (skip calibration)] [--out DIR] [--report-only (the table of DIR's earlier run)]"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        --epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        --threads) need_value "$@"; THREADS=$2; shift 2 ;;
        --ns) need_value "$@"; NS=$2; NS_SET=1; shift 2 ;;
        --topology) need_value "$@"; need_file --topology "$2"; TOPO=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --report-only) REPORT_ONLY=1; shift ;;
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
if [ "$REPORT_ONLY" = 0 ]; then
    need_dptrain
    need_mpirun
    mkdir -p "$OUT"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    MPIRUN=(mpirun --oversubscribe --bind-to none)
    rm -f "$OUT"/predict-n*.jsonl "$OUT"/mpi-n*.jsonl "$OUT"/calibrate-n*.txt "$OUT"/host-n* "$OUT"/profile-n* "$OUT"/run.txt
    common=(--epochs "$EPOCHS" --batch-size 64 --no-progress)
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    # each measurement right after its own calibration and prediction: on a shared machine the
    # load drifts, and the all-reduce, the ranks' jitter and the master's first touch with it.
    # The calibration runs with the N processes it predicts for (2 for N = 1, which has no link).
    for r in $(seq "$ROUNDS"); do
        for n in $NS; do
            per=$(( THREADS / n > 0 ? THREADS / n : 1 ))
            topo=$TOPO
            if [ -z "$TOPO" ]; then
                topo="$OUT/host-n$n-r$r"
                "${MPIRUN[@]}" -np $(( n > 1 ? n : 2 )) "$DPTRAIN" calibrate --backend mpi --threads 1 --out "$topo" \
                    > "$OUT/calibrate-n$n-r$r.txt" || { echo "calibrate -np $n failed: see $OUT/calibrate-n$n-r$r.txt" >&2; exit 1; }
            fi
            # one prediction for both modes (the same profile and overhead: their difference is the
            # model's); --replicas n: the prediction for this N (predict covers 1, 2, 4, 8 and --replicas)
            "$DPTRAIN" predict --batch-size 64 --threads "$THREADS" --replicas "$n" --topology "$topo" \
                --log "$OUT/predict-n$n-r$r.jsonl" --save-profile "$OUT/profile-n$n-r$r" > /dev/null
            for mode in ddp dp; do
                "${MPIRUN[@]}" -np "$n" "$DPTRAIN" train "${common[@]}" --backend mpi --mode "$mode" --threads "$per" \
                    --log "$OUT/mpi-n$n-$mode-r$r.jsonl" > /dev/null \
                    || echo "warning: mpirun -np $n --mode $mode (round $r) failed: its row lacks that round" >&2
            done
        done
    done
    {
        echo "load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg) (other users of the machine)"
        echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC'); mpirun $(mpirun --version | head -1 | awk '{print $NF}')"
        echo "command: examples/bench/predict_vs_measured.sh --rounds $ROUNDS --epochs $EPOCHS --threads $THREADS --ns \"$NS\"$([ -n "$TOPO" ] && echo " --topology $TOPO")"
    } > "$OUT/run.txt"
fi
[ -f "$OUT/run.txt" ] || { echo "$(basename "$0"): no finished run in $OUT" >&2; exit 1; }
# the N of the run itself (its command line), unless --ns picks some
[ "$REPORT_ONLY" = 1 ] && [ "$NS_SET" = 0 ] && NS=$(sed -n 's/^command: .*--ns "\([^"]*\)".*/\1/p' "$OUT/run.txt")
python3 - "$OUT" "$NS" <<'PY'
import glob, json, os, statistics, sys
out, ns = sys.argv[1], sys.argv[2].split()
# the calibrated figures the predictions used (medians over rounds), per N
def topo_keys(f):
    d = {}
    for l in open(f):
        l = l.split("#")[0].split()
        if len(l) == 2:
            try: d[l[0]] = float(l[1])
            except ValueError: pass
    return d
cal = {}
for n in ns:
    fs = sorted(glob.glob(f"{out}/host-n{n}-r*"))
    if fs:
        ks = [topo_keys(f) for f in fs]
        cal[n] = {k: statistics.median(x.get(k, 0) for x in ks) for k in
                  ("latency_us", "bus_bandwidth_GBps", "sync_jitter_us", "touch_broadcast_us_per_MB", "reduce_bandwidth_GBps")}
if cal:
    print("calibrated (medians over rounds): N: alpha us / all-reduce GB/s / reduce GB/s / sync_jitter us / master's touch us per MB")
    for n, c in cal.items():
        print(f"  {n}: {c['latency_us']:.2f} / {c['bus_bandwidth_GBps']:.2f} / {c['reduce_bandwidth_GBps']:.2f} / "
              f"{c['sync_jitter_us']:.1f} / {c['touch_broadcast_us_per_MB']:.0f}")
    print()
pred = {}
for n in ns:
    for mode in ("ddp", "dp"):
        # predict-nN-rR.jsonl (both modes); predict-nN-MODE-rR.jsonl from runs before 2026-11-23 09:00
        for f in sorted(glob.glob(f"{out}/predict-n{n}-r*.jsonl") + glob.glob(f"{out}/predict-n{n}-{mode}-r*.jsonl")):
            for l in open(f):
                e = json.loads(l)
                if e.get("event") == "predict" and e["mode"] == mode and e["devices"] == int(n):
                    e["_round"] = f.rsplit("-r", 1)[1].split(".")[0]
                    pred.setdefault((mode, int(n)), []).append(e)
print("| N | mode | predicted s/epoch | measured s/epoch | error | error per round, paired: median [min, max] | "
      "measured typical epoch (median step x steps) | predicted ms/step: compute / exposed comm / DP serial / host | "
      "measured comm_s/epoch | target |")
print("|---:|---|---:|---:|---:|---|---:|---|---:|---|")
rows, summary = [], []
for n in ns:
    for mode in ("ddp", "dp"):
        eps, steps, nsteps, paired, pairs = [], [], [], [], []
        for f in sorted(glob.glob(f"{out}/mpi-n{n}-{mode}-r*.jsonl")):
            ev = [json.loads(l) for l in open(f)]
            mine = [e for e in ev if e.get("event") == "epoch"][1:]
            eps += mine
            st = [e for e in ev if e.get("event") == "step" and e["epoch"] > 1]
            steps += [e["seconds"] for e in st if "seconds" in e]
            nsteps += [sum(1 for e in ev if e.get("event") == "step" and e["epoch"] == 1)]
            # the prediction made right before this round's measurement, against it: the load
            # of the moment is in both
            r = f.rsplit("-r", 1)[1].split(".")[0]
            pr = [e for e in pred.get((mode, int(n)), []) if e.get("_round") == r]
            if mine and pr:
                pairs.append((pr[0]["epoch_s"], statistics.median(e["seconds"] for e in mine)))
                paired.append(pairs[-1][0] / pairs[-1][1] - 1)
        p = pred.get((mode, int(n)), [])
        if not eps or not p:
            why = "no measured epoch (did mpirun fail?)" if not eps else "no prediction for this N"
            print(f"| {n} | {mode} | | | | | | | | NO ROW: {why} |")
            rows.append((n, mode, None))
            continue
        meas = statistics.median(e["seconds"] for e in eps)
        typ = statistics.median(steps) * statistics.median(nsteps) if steps else float("nan")
        comm = statistics.median(e.get("comm_s", 0) for e in eps)
        pe = statistics.median(x["epoch_s"] for x in p)
        med = lambda k: 1e3 * statistics.median(x[k] for x in p)
        err = (pe - meas) / meas
        target = 0.10 if mode == "ddp" else 0.15
        spread = f"{100*statistics.median(paired):+.1f}% [{100*min(paired):+.1f}, {100*max(paired):+.1f}]" if paired else "-"
        print(f"| {n} | {mode} | {pe:.2f} | {meas:.2f} | {100*err:+.1f}% | {spread} | {typ:.2f} | "
              f"{med('compute_s'):.3f} / {med('exposed_comm_s'):.3f} / {med('serial_s'):.3f} / {med('host_s'):.3f} | "
              f"{comm:.3f} | {'within' if abs(err) <= target else 'OUTSIDE'} {int(100*target)}% |")
        rows.append((n, mode, abs(err) <= target))
        summary.append({"devices": int(n), "mode": mode, "predicted_s": pe, "measured_s": meas, "error": err,
                        "target": target, "rounds": [{"predicted_s": a, "measured_s": b} for a, b in pairs]})
# the rows for plots (examples/bench/plot_predict_vs_measured.py)
json.dump({"rows": summary}, open(f"{out}/summary.json", "w"), indent=1)
ok = [f"N={n} {m}" for n, m, v in rows if v]
bad = [f"N={n} {m}" for n, m, v in rows if v is False]
none = [f"N={n} {m}" for n, m, v in rows if v is None]
print()
print(f"targets (epoch time, medians over rounds: DDP within 10%, DP within 15%): "
      f"{len(ok)} of {len(rows)} rows meet them")
print(f"  within:  {', '.join(ok) or '-'}")
print(f"  OUTSIDE: {', '.join(bad) or '-'}")
if none: print(f"  no row:  {', '.join(none)}")
if not summary:
    sys.exit("predict_vs_measured.sh: nothing was measured: no row has both a measurement and a prediction (see %s)" % out)
PY
echo
cat "$OUT/run.txt" 2>/dev/null || true
