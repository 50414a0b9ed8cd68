#!/usr/bin/env bash
# Test accuracy of dptrain against the PyTorch reference on LeNet / Fashion-MNIST, over several seeds:
# per-epoch accuracy per seed, the mean over seeds, the difference of the means at the final epoch and
# over the last 3 epochs, as markdown, and a plot (docs/img/accuracy_vs_pytorch.png). See --help.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/examples/bench"
PROG=$(basename "$0")

usage() {
    cat <<EOF
Usage: $PROG [options]

Trains LeNet on Fashion-MNIST (batch 64, SGD lr 0.01 momentum 0.9) with dptrain and with the PyTorch
reference (examples/pytorch/lenet_reference.py) for each seed, then prints the test accuracy after every
epoch per seed, the mean over seeds per epoch, and the difference of the means (dptrain - PyTorch) at the
final epoch and over the last 3 epochs, as markdown (also OUT/accuracy_vs_pytorch.md), and draws the mean
curves with the per-seed curves faint.

Options:
      --seeds "S..."  seeds (default "0 1 2")
  -e, --epochs E      epochs per run (default 10)
  -t, --threads T     threads for both (default 2; accuracy does not depend on it much, time does)
      --data DIR      data directory for both (default: each program's default,
                      /usr/share/datasets/fashion-mnist)
      --out DIR       logs and the markdown go here (default out/accuracy)
      --plot FILE     the plot (default docs/img/accuracy_vs_pytorch.png; with --only, OUT/accuracy_WHICH.png)
      --only WHICH    run only dptrain or only pytorch (no difference then)
      --reuse         keep a run whose log in OUT is already complete (same seed, epochs, batch, lr,
                      momentum) instead of running it again
  -h, --help          this text

Environment:
  DPTRAIN   the dptrain binary (default build/dptrain in the repository)
  PYTHON    a python3 with torch, numpy and matplotlib (default: the first of python3, /usr/bin/python3
            that has them)

Example: $PROG --seeds "0 1 2" --epochs 10
EOF
}

die() { echo "$PROG: $*" >&2; exit 1; }
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"

SEEDS="0 1 2" EPOCHS=10 THREADS=2 DATA="" OUT="$ROOT/out/accuracy" PLOT="" ONLY="" REUSE=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --reuse) REUSE=1; shift ;;
        --seeds|-e|--epochs|-t|--threads|--data|--out|--plot|--only)
            need_value "$@"
            case "$1" in
                --seeds) SEEDS=$2 ;;
                -e|--epochs) EPOCHS=$2 ;;
                -t|--threads) THREADS=$2 ;;
                --data) DATA=$2 ;;
                --out) OUT=$2 ;;
                --plot) PLOT=$2 ;;
                --only) ONLY=$2 ;;
            esac
            shift 2 ;;
        *) unknown_arg "$1" ;;
    esac
done
read -r -a SEED_LIST <<<"$SEEDS" || true
[ ${#SEED_LIST[@]} -ge 1 ] || die_usage "--seeds: expected at least one seed"
for s in "${SEED_LIST[@]}"; do need_uint --seeds "$s" 0; done
need_uint --epochs "$EPOCHS" 1
need_uint --threads "$THREADS" 1
set_only "$ONLY"

# ---- prerequisites: say everything that is missing at once
missing=()
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
REF="$ROOT/examples/pytorch/lenet_reference.py"
want_dptrain
if [ $RUN_PT = 1 ]; then need='import torch, numpy, matplotlib'; else need='import matplotlib'; fi
find_python "$need"
if [ -z "$PY" ]; then
    pkgs="python3-matplotlib"
    if [ $RUN_PT = 1 ]; then pkgs="python3-torch python3-numpy python3-matplotlib"; fi
    missing+=("a python3 that can '$need'${PYTHON:+ (PYTHON=$PYTHON cannot)}: apt-get install $pkgs, or set PYTHON.")
fi
[ -f "$REF" ] || missing+=("$REF (the PyTorch reference) is missing from the checkout.")
DATADIR=${DATA:-/usr/share/datasets/fashion-mnist}
want_fashion_mnist "$DATADIR"
fail_missing

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -z "$PLOT" ]; then
    if [ -n "$ONLY" ]; then PLOT="$OUT/accuracy_$ONLY.png"; else PLOT="$ROOT/docs/img/accuracy_vs_pytorch.png"; fi
fi

data_args=()
if [ -n "$DATA" ]; then data_args=(--data "$DATA"); fi
cmd_for() {  # name seed -> the command line
    local c
    if [ "$1" = dptrain ]; then
        c=$(printf '%q ' "$DPTRAIN" train --model lenet --dataset fashion-mnist "${data_args[@]}" --epochs "$EPOCHS" \
            --batch-size 64 --lr 0.01 --momentum 0.9 --seed "$2" --threads "$THREADS" --log "$OUT/dptrain-seed$2.jsonl")
    else
        c=$(printf '%q ' "$PY" "$REF" "${data_args[@]}" --epochs "$EPOCHS" --batch-size 64 --lr 0.01 --momentum 0.9 \
            --seed "$2" --threads "$THREADS" --log "$OUT/pytorch-seed$2.jsonl")
    fi
    echo "${c% }"
}

run_one() {  # name seed
    local name=$1 s=$2 cmd log t0 t1 rc
    log="$OUT/$name-seed$s.jsonl"
    cmd=$(cmd_for "$name" "$s")
    if [ $REUSE = 1 ] && "$PY" "$HERE/jsonl_stats.py" complete "$log" --epochs "$EPOCHS" --expect "seed=$s" \
            --expect batch_size=64 --expect lr=0.01 --expect momentum=0.9 2>/dev/null; then
        echo "$PROG: seed $s: $name: reusing $log" >&2
        REUSED=$((REUSED + 1))
        return 0
    fi
    rm -f "$log"
    printf '%s: seed %s: %s, %d epochs ... ' "$PROG" "$s" "$name" "$EPOCHS" >&2
    t0=$(date +%s)
    rc=0
    eval "$cmd" >"$OUT/$name-seed$s.txt" 2>&1 </dev/null || rc=$?
    t1=$(date +%s)
    if [ $rc -ne 0 ]; then
        echo "failed (exit $rc)" >&2
        echo "--- last lines of $OUT/$name-seed$s.txt:" >&2
        tail -n 15 "$OUT/$name-seed$s.txt" >&2
        die "$name failed for seed $s; command: $cmd"
    fi
    echo "$((t1 - t0)) s" >&2
    RAN=$((RAN + 1))
}

started=$(date -u '+%Y-%m-%d %H:%M UTC')
cpu=$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1 || true)
echo "$PROG: seeds ${SEED_LIST[*]}, $EPOCHS epochs, $THREADS thread(s), logs in $OUT" >&2
dp_args=() pt_args=() RAN=0 REUSED=0
for s in "${SEED_LIST[@]}"; do
    if [ $RUN_DP = 1 ]; then run_one dptrain "$s"; dp_args+=("$s=$OUT/dptrain-seed$s.jsonl"); fi
    if [ $RUN_PT = 1 ]; then run_one pytorch "$s"; pt_args+=("$s=$OUT/pytorch-seed$s.jsonl"); fi
done

args=(accuracy --epochs "$EPOCHS" --last 3 --md "$OUT/accuracy_vs_pytorch.md" --plot "$PLOT"
      --title "LeNet / Fashion-MNIST, batch 64, SGD lr 0.01 momentum 0.9, seeds ${SEED_LIST[*]}"
      --meta "Machine=${cpu:-unknown CPU}, nproc $(nproc 2>/dev/null || echo '?'); $THREADS thread(s)"
      --meta "Date=$started ($RAN run(s) made now, $REUSED reused from complete logs in $OUT)")
if [ $RUN_DP = 1 ]; then args+=(--dptrain "${dp_args[@]}"); fi
if [ $RUN_PT = 1 ]; then args+=(--pytorch "${pt_args[@]}"); fi
args+=(--command "# for SEED in ${SEED_LIST[*]}:")
if [ $RUN_DP = 1 ]; then args+=(--command "$(cmd_for dptrain SEED)"); fi
if [ $RUN_PT = 1 ]; then args+=(--command "$(cmd_for pytorch SEED)"); fi
"$PY" "$HERE/jsonl_stats.py" "${args[@]}"
echo "$PROG: markdown written to $OUT/accuracy_vs_pytorch.md, plot to $PLOT" >&2
