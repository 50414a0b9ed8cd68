#!/usr/bin/env bash
# Epoch time of LeNet / Fashion-MNIST at batch 64, dptrain against PyTorch with the same thread count.
# Runs are interleaved (round 1: dptrain then PyTorch, round 2: the same, ...) so that slow phases of the
# machine hit both; the first epoch of every run is dropped (warm-up) and the median of the rest is
# reported, with min/max, as a markdown block ready for docs/results.md. See --help.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/examples/bench"
PROG=$(basename "$0")

usage() {
    cat <<EOF
Usage: $PROG [options]

Times LeNet / Fashion-MNIST epochs (batch 64, SGD lr 0.01 momentum 0.9) of dptrain and of the PyTorch
reference (examples/pytorch/lenet_reference.py) with the same thread count, interleaved: for each round,
dptrain for E epochs, then PyTorch for E epochs. Drops epoch 1 of every run and prints the median
seconds/epoch of each, the ratio PyTorch/dptrain, the machine and the commands, as markdown (also written
to OUT/epoch_time.md). Every run also records how much CPU other processes used meanwhile (from
/proc/stat), and the summary warns when the machine was not quiet.

Options:
  -r, --rounds R      rounds (default 3)
  -e, --epochs E      epochs per run (default 3; at least 2, the first is dropped)
  -t, --threads T     threads for both (default 2)
  -s, --seed S        seed for both (default 0)
      --data DIR      data directory for both (default: each program's default,
                      /usr/share/datasets/fashion-mnist)
      --out DIR       logs and the markdown go here (default out/epoch-time)
      --only WHICH    run only dptrain or only pytorch (no ratio then)
      --wait-idle S   before each run, wait up to S seconds for the machine to be idle (default 0: no wait)
  -h, --help          this text

Environment:
  DPTRAIN   the dptrain binary (default build/dptrain in the repository)
  PYTHON    a python3 that has torch and numpy (default: the first of python3, /usr/bin/python3 that does)
  OPENBLAS_NUM_THREADS, OMP_NUM_THREADS are passed through unchanged; if unset, the PyTorch reference uses
  OpenBLAS with 1 thread and --threads OpenMP threads (see lenet_reference.py).

Example: $PROG --rounds 3 --epochs 3 --threads 2
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"

ROUNDS=3 EPOCHS=3 THREADS=2 SEED=0 DATA="" OUT="$ROOT/out/epoch-time" ONLY="" WAIT_IDLE=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -r|--rounds|-e|--epochs|-t|--threads|-s|--seed|--data|--out|--only|--wait-idle)
            need_value "$@"
            case "$1" in
                -r|--rounds) ROUNDS=$2 ;;
                -e|--epochs) EPOCHS=$2 ;;
                -t|--threads) THREADS=$2 ;;
                -s|--seed) SEED=$2 ;;
                --data) DATA=$2 ;;
                --out) OUT=$2 ;;
                --only) ONLY=$2 ;;
                --wait-idle) WAIT_IDLE=$2 ;;
            esac
            shift 2 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
need_uint --threads "$THREADS" 1
need_uint --seed "$SEED" 0
need_uint --wait-idle "$WAIT_IDLE" 0
set_only "$ONLY"

# ---- prerequisites: say everything that is missing at once
missing=()
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
REF="$ROOT/examples/pytorch/lenet_reference.py"
want_dptrain
if [ $RUN_PT = 1 ]; then find_python 'import torch, numpy'; else find_python ""; fi
if [ -z "$PY" ]; then
    if [ $RUN_PT = 1 ]; then
        missing+=("a python3 with torch and numpy${PYTHON:+ (PYTHON=$PYTHON cannot import them)}: apt-get install python3-torch python3-numpy, or set PYTHON.")
    else
        missing+=("python3 (for the statistics): apt-get install python3, or set PYTHON.")
    fi
fi
[ -f "$REF" ] || missing+=("$REF (the PyTorch reference) is missing from the checkout.")
DATADIR=${DATA:-/usr/share/datasets/fashion-mnist}
want_fashion_mnist "$DATADIR"
fail_missing

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# ---- the machine
cpu=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1 || true)
ncpu=$(nproc 2>/dev/null || echo "?")
blas_alt=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value:[[:space:]]*//p' || true)
[ -n "$blas_alt" ] || blas_alt="unknown (update-alternatives --query libblas.so.3-x86_64-linux-gnu gave no Value)"
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
started=$(date -u '+%Y-%m-%d %H:%M UTC')

data_args=()
if [ -n "$DATA" ]; then data_args=(--data "$DATA"); fi
dp_cmd() {  # round -> the dptrain command line
    local c
    c=$(printf '%q ' "$DPTRAIN" train --model lenet --dataset fashion-mnist "${data_args[@]}" --epochs "$EPOCHS" \
        --batch-size 64 --lr 0.01 --momentum 0.9 --seed "$SEED" --threads "$THREADS" --log "$OUT/dptrain-r$1.jsonl")
    echo "${c% }"
}
pt_cmd() {
    local c
    c=$(printf '%q ' "$PY" "$REF" "${data_args[@]}" --epochs "$EPOCHS" --batch-size 64 --lr 0.01 --momentum 0.9 \
        --seed "$SEED" --threads "$THREADS" --log "$OUT/pytorch-r$1.jsonl")
    echo "${c% }"
}

run_one() {  # name round
    local name=$1 r=$2 cmd t0 t1 rc load others
    if [ "$name" = dptrain ]; then cmd=$(dp_cmd "$r"); else cmd=$(pt_cmd "$r"); fi
    load="$OUT/$name-r$r.load.json"
    rm -f "$OUT/$name-r$r.jsonl" "$load"
    printf '%s: round %d/%d: %s ... ' "$PROG" "$r" "$ROUNDS" "$name" >&2
    t0=$(date +%s)
    rc=0
    # the helper runs the command and records the CPU time other processes took meanwhile
    eval "\"\$PY\" \"\$HERE/jsonl_stats.py\" run --wait-idle \"\$WAIT_IDLE\" --load-file \"\$load\" -- $cmd" \
        >"$OUT/$name-r$r.txt" 2>&1 </dev/null || rc=$?
    t1=$(date +%s)
    if [ $rc -ne 0 ]; then
        echo "failed (exit $rc)" >&2
        echo "--- last lines of $OUT/$name-r$r.txt:" >&2
        tail -n 15 "$OUT/$name-r$r.txt" >&2
        die "$name failed in round $r; command: $cmd"
    fi
    others=$("$PY" -c 'import json, sys; print("%.2f" % json.load(open(sys.argv[1]))["other_cores"])' "$load" 2>/dev/null || echo "?")
    echo "$((t1 - t0)) s (other processes meanwhile: $others cores)" >&2
}

echo "$PROG: $ROUNDS round(s) x $EPOCHS epochs, $THREADS thread(s), logs in $OUT" >&2
dp_logs=() pt_logs=()
for r in $(seq 1 "$ROUNDS"); do
    if [ $RUN_DP = 1 ]; then run_one dptrain "$r"; dp_logs+=("$OUT/dptrain-r$r.jsonl"); fi
    if [ $RUN_PT = 1 ]; then run_one pytorch "$r"; pt_logs+=("$OUT/pytorch-r$r.jsonl"); fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

case "$ONLY" in
    "") order="interleaved: dptrain, then PyTorch" ;;
    dptrain) order="dptrain only" ;;
    pytorch) order="PyTorch only" ;;
esac
args=(epoch-time --drop 1 --md "$OUT/epoch_time.md"
      --title "Epoch time, LeNet / Fashion-MNIST, batch 64, $THREADS thread(s)"
      --meta "Machine=${cpu:-unknown CPU}, nproc $ncpu"
      --meta "Date=$started"
      --meta "libblas.so.3 alternative=$blas_alt"
      --meta "Runs=$ROUNDS round(s) of $EPOCHS epochs each ($order), epoch 1 of every run dropped; seed $SEED"
      --meta "Load average before / after=$load_before / $load_after")
if [ $RUN_DP = 1 ]; then args+=(--dptrain "${dp_logs[@]}"); fi
if [ $RUN_PT = 1 ]; then args+=(--pytorch "${pt_logs[@]}"); fi
args+=(--command "# for R in $(seq -s ' ' 1 "$ROUNDS"), in this order:")
if [ $RUN_DP = 1 ]; then args+=(--command "$(dp_cmd R)"); fi
if [ $RUN_PT = 1 ]; then args+=(--command "$(pt_cmd R)"); fi
"$PY" "$HERE/jsonl_stats.py" "${args[@]}"
echo "$PROG: markdown written to $OUT/epoch_time.md" >&2
