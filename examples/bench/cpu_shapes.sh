#!/usr/bin/env bash
# dptrain on the CPU as processes x threads: LeNet / Fashion-MNIST, batch 64, the same cores filled
# as one process of many threads or many processes (mpirun, --backend mpi) of few, and one process
# at its default --threads, interleaved round by round, against PyTorch 2.x's best single-process
# setting in the same run. Writes the table into docs/results.md between its markers. See --help.
set -euo pipefail

PROG=$(basename "$0")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$ROOT/examples/lib/args.sh"
ARGS="$*"
usage() {
    cat <<EOF
Usage: $PROG [options]

Shapes (processes x threads), N the usable cores: 1x1, 1x4, 1x8, 1xN, 2x(N/2), (N/2)x2, Nx1 (those
that fit in N, each once; on 2 cores 1x1, 1x2, 2x1), and "1 x default": one process without
--threads (the row says how many threads it used). More than one process: mpirun --bind-to none
--backend mpi (skipped, and said, without mpirun). Each round runs every shape once in turn and
PyTorch 2.x once; the table gives the median s/epoch over epochs 2.. of every round, min-max, and
each against the best shape. PyTorch: before the rounds, torch.set_num_threads(T) for T in
--torch-threads, each in the default layout and with --channels-last, 2 epochs each
(examples/pytorch/cpu_reference.py, the same training); the fastest pair runs in the rounds.

Options:
  -r, --rounds R          rounds (default 3)
  -e, --epochs E          epochs per run (default 3; the first is dropped)
      --cores N           the usable cores (default: as dptrain counts them, from the affinity mask
                          and the cgroup CPU quota: its log's "cores")
      --torch-threads L   PyTorch's thread counts to try (default 1 2 4 ... N)
      --skip-pytorch      no PyTorch
      --data DIR          Fashion-MNIST (default /usr/share/datasets/fashion-mnist)
      --out DIR           logs and cpu_shapes.md (default out/cpu-shapes)
      --results FILE      the markdown file whose section (between "<!-- cpu-shapes:begin -->" and
                          "<!-- cpu-shapes:end -->", appended if absent) is replaced (default
                          docs/results.md; none: leave it)
  -h, --help              this text

Environment: DPTRAIN (default build/dptrain), TORCH_PYTHON (default out/torch2/bin/python if it is
there, else python3; a Python whose torch is not 2.x is reported and skipped).
Exit: 0 measured, 1 nothing was measured (every dptrain run failed), 2 bad usage.

Example: examples/bench/cpu_shapes.sh --rounds 5
EOF
}
ROUNDS=3 EPOCHS=3 CORES="" TORCH_THREADS="" SKIP_TORCH=0 DATA=/usr/share/datasets/fashion-mnist
OUT=$ROOT/out/cpu-shapes RESULTS=$ROOT/docs/results.md
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -r|--rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        -e|--epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        --cores) need_value "$@"; CORES=$2; shift 2 ;;
        --torch-threads) need_value "$@"; TORCH_THREADS=$2; shift 2 ;;
        --skip-pytorch) SKIP_TORCH=1; shift ;;
        --data) need_value "$@"; DATA=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --results) need_value "$@"; RESULTS=$2; shift 2 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
[ -z "$CORES" ] || need_uint --cores "$CORES" 1
[ -z "$TORCH_THREADS" ] || need_uints --torch-threads "$TORCH_THREADS" 1
need_nonempty --out "$OUT"
need_nonempty --results "$RESULTS"
[ -d "$DATA" ] || die_usage "--data: '$DATA' is not a directory"
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
[ -x "$DPTRAIN" ] || die_usage "DPTRAIN: '$DPTRAIN' is not an executable file (build it: cmake --build build)"
if [ "$RESULTS" != none ] && [ ! -f "$RESULTS" ]; then die_usage "--results: '$RESULTS' is not a file"; fi
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

TRAIN=(train --model lenet --dataset fashion-mnist --data "$DATA" --batch-size 64 --lr 0.01 --momentum 0.9
       --seed 0 --quiet)
# a number of the config line of a dptrain log
config_num() { grep -m1 '"event":"config"' "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
# seconds of epochs 2.. of a log (dptrain's or cpu_reference.py's, whose JSON has spaces), one per line
epoch_s() {
    grep -E '"event": ?"epoch"' "$1" | tail -n +2 | grep -oE '"seconds": ?[0-9.e-]+' | cut -d: -f2 | tr -d ' ' || true
}

CORES_FROM="--cores"
if [ -z "$CORES" ]; then
    "$DPTRAIN" "${TRAIN[@]}" --epochs 1 --max-steps 1 --log "$OUT/cores.jsonl" >"$OUT/cores.txt" 2>&1 ||
        nothing_measured "dptrain failed before any shape ran (see $OUT/cores.txt)"
    CORES=$(config_num "$OUT/cores.jsonl" cores)
    CORES_FROM=$(grep -m1 -o '"cores_from":"[^"]*"' "$OUT/cores.jsonl" | cut -d'"' -f4)
    [ -n "$CORES" ] || nothing_measured "dptrain's log has no core count (see $OUT/cores.jsonl)"
fi
N=$CORES

# the shapes "P T" (T 0: the default), each once, P x T <= N
SHAPES=()
add() {
    local s="$1 $2" x
    [ "$1" -ge 1 ] && [ "$2" -ge 1 ] && [ $(($1 * $2)) -le "$N" ] || return 0
    for x in "${SHAPES[@]}"; do [ "$x" = "$s" ] && return 0; done
    SHAPES+=("$s")
}
add 1 1; add 1 4; add 1 8; add 1 "$N"; add 2 $((N / 2)); add $((N / 2)) 2; add "$N" 1
SHAPES+=("1 0")
MPIRUN=$(command -v mpirun || true)
MPI_OK=0
if [ -n "$MPIRUN" ] && "$DPTRAIN" --version | grep -q 'mpi ('; then MPI_OK=1; fi

TORCH_PY=${TORCH_PYTHON:-}
if [ -z "$TORCH_PY" ]; then
    TORCH_PY=python3
    [ -x "$ROOT/out/torch2/bin/python" ] && TORCH_PY=$ROOT/out/torch2/bin/python
fi
TORCH_VER="" TORCH_NOTE=""
if [ $SKIP_TORCH = 0 ]; then
    TORCH_VER=$("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
    if [[ $TORCH_VER != 2.* ]]; then
        TORCH_NOTE="PyTorch 2.x not measured: $TORCH_PY has ${TORCH_VER:+torch $TORCH_VER}${TORCH_VER:-no torch} (set TORCH_PYTHON)"
        echo "$PROG: $TORCH_NOTE" >&2
        TORCH_VER=""
    fi
fi
torch_run() {  # threads epochs log [--channels-last]
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 "$TORCH_PY" \
        "$ROOT/examples/pytorch/cpu_reference.py" lenet --data "$DATA" --epochs "$2" --threads "$1" --seed 0 \
        --log "$3" ${4:+"$4"} >"${3%.jsonl}.txt" 2>&1
}
TORCH_T="" TORCH_LAYOUT=""
if [ -n "$TORCH_VER" ]; then
    if [ -z "$TORCH_THREADS" ]; then
        for ((t = 1; t < N; t *= 2)); do TORCH_THREADS+="$t "; done
        TORCH_THREADS+="$N"
    fi
    best=""
    for t in ${TORCH_THREADS//,/ }; do
        for layout in "" --channels-last; do
            log="$OUT/torch-try-t$t${layout:+-cl}.jsonl"
            torch_run "$t" 2 "$log" "$layout" ||
                { echo "$PROG: PyTorch with $t threads ${layout:-(default layout)} failed (see ${log%.jsonl}.txt)" >&2; continue; }
            s=$(epoch_s "$log" | head -1)
            [ -n "$s" ] || continue
            if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then
                best=$s TORCH_T=$t TORCH_LAYOUT=$layout
            fi
        done
    done
    [ -n "$TORCH_T" ] || TORCH_NOTE="PyTorch $TORCH_VER failed at every thread count (see torch-try-*.txt in --out)"
fi

run_shape() {  # P T round
    local p=$1 t=$2 log="$OUT/p$1-t$2-r$3.jsonl" cmd
    local thr=(--threads "$t")
    [ "$t" != 0 ] || thr=()
    if [ "$p" = 1 ]; then
        cmd=("$DPTRAIN" "${TRAIN[@]}" --epochs "$EPOCHS" --backend sim "${thr[@]}" --log "$log")
    else
        cmd=("$MPIRUN" --oversubscribe --bind-to none -np "$p" "$DPTRAIN" "${TRAIN[@]}" --epochs "$EPOCHS"
             --backend mpi "${thr[@]}" --log "$log")
    fi
    CMD["$p $t"]="${cmd[*]}"
    if ! "${cmd[@]}" >"${log%.jsonl}.txt" 2>&1; then
        echo "$PROG: $p x ${t/#0/default} failed: $(tail -n 2 "${log%.jsonl}.txt" | tr '\n' ' ')" >&2
        return 0
    fi
    epoch_s "$log" >>"$OUT/s-$p-$t"
    [ "$t" != 0 ] || config_num "$log" threads_used >"$OUT/used-default"
}
declare -A CMD
rm -f "$OUT"/s-* "$OUT/used-default"
for ((r = 1; r <= ROUNDS; r++)); do
    echo "$PROG: round $r/$ROUNDS" >&2
    for s in "${SHAPES[@]}"; do
        read -r p t <<<"$s"
        if [ "$p" -gt 1 ] && [ $MPI_OK = 0 ]; then continue; fi
        run_shape "$p" "$t" "$r"
    done
    if [ -n "$TORCH_T" ]; then
        torch_run "$TORCH_T" "$EPOCHS" "$OUT/torch-r$r.jsonl" "$TORCH_LAYOUT" && epoch_s "$OUT/torch-r$r.jsonl" >>"$OUT/s-torch"
    fi
done

stats() { sort -g "$1" | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f", m, v[1], v[NR]}'; }
best=""
for f in "$OUT"/s-[0-9]*; do
    [ -s "$f" ] || continue
    read -r m _ _ <<<"$(stats "$f")"
    if [ -z "$best" ] || awk -v a="$m" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$m; fi
done
[ -n "$best" ] || nothing_measured "every dptrain run failed (see $OUT/*.txt)"

MODEL=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
MD="$OUT/cpu_shapes.md"
{
    echo "## Processes x threads on the CPU"
    echo
    echo "$MODEL, $N usable cores ($CORES_FROM; $(nproc --all) online), $(date -u +%Y-%m-%d). LeNet /"
    echo "Fashion-MNIST, batch 64 (global), s/epoch: median (min-max) of $([ "$EPOCHS" = 2 ] && echo "epoch 2" || echo "epochs 2-$EPOCHS") of $ROUNDS interleaved rounds."
    echo
    echo "| processes x threads | s/epoch | / the best shape |"
    echo "|---|---|---:|"
    for s in "${SHAPES[@]}"; do
        read -r p t <<<"$s"
        label="$p x $t"
        if [ "$t" = 0 ]; then label="1 x default ($(cat "$OUT/used-default" 2>/dev/null || echo '?') threads used)"; fi
        f="$OUT/s-$p-$t"
        if [ "$p" -gt 1 ] && [ $MPI_OK = 0 ]; then
            echo "| $label | not run: no mpirun or no MPI backend in this build | |"
        elif [ -s "$f" ]; then
            read -r m lo hi <<<"$(stats "$f")"
            echo "| $label | $m ($lo-$hi) | $(awk -v a="$m" -v b="$best" 'BEGIN { printf "%.2f", a / b }') |"
        else
            echo "| $label | failed (see $(basename "$OUT")/p$p-t$t-r*.txt) | |"
        fi
    done
    if [ -s "$OUT/s-torch" ]; then
        read -r m lo hi <<<"$(stats "$OUT/s-torch")"
        echo "| PyTorch $TORCH_VER, 1 x $TORCH_T${TORCH_LAYOUT:+, channels-last} (its best of ${TORCH_THREADS% }, each in both layouts) | $m ($lo-$hi) | $(awk -v a="$m" -v b="$best" 'BEGIN { printf "%.2f", a / b }') |"
    fi
    echo
    [ -z "$TORCH_NOTE" ] || { echo "$TORCH_NOTE."; echo; }
    echo "Command: \`examples/bench/cpu_shapes.sh${ARGS:+ $ARGS}\`${TORCH_VER:+ (PyTorch: $TORCH_PY)}; one process runs"
    echo "\`dptrain ${TRAIN[*]/#$DATA/DATA} --epochs $EPOCHS --backend sim --threads T\`, P processes"
    echo "\`mpirun --bind-to none -np P dptrain ... --backend mpi --threads T\`; PyTorch"
    echo "\`examples/pytorch/cpu_reference.py lenet --threads T\` with OMP_NUM_THREADS=T and its BLAS at 1 thread."
} >"$MD"
cat "$MD"

if [ "$RESULTS" != none ]; then
    tmp=$(mktemp)
    awk -v md="$MD" '
        function emit() { print "<!-- cpu-shapes:begin -->"; while ((getline l < md) > 0) print l; print "<!-- cpu-shapes:end -->" }
        /^<!-- cpu-shapes:begin -->$/ { emit(); skip = 1; done = 1; next }
        /^<!-- cpu-shapes:end -->$/ { skip = 0; next }
        !skip { print }
        END { if (!done) { print ""; emit() } }' "$RESULTS" >"$tmp"
    cat "$tmp" >"$RESULTS" && rm -f "$tmp"
    echo "$PROG: wrote the table into $RESULTS" >&2
fi
