#!/usr/bin/env bash
# multigpu.sh: the NCCL backend on 2 or more GPUs of one machine against the GPU sim, bitwise, under
# every launcher; the check.sh phase `multigpu` (run when nvidia-smi -L lists 2 or more GPUs).
#
#   examples/gpu/multigpu.sh [--build DIR] [--out DIR] [--data DIR] [--gpus N] [--steps S] [--dry-run]
#
# With W = 2 and W = N (every GPU; also 3 when N >= 3, uneven shards), for DDP, DP, lenet-bn
# --sync-bn and --accumulate 2: torchrun, mpirun and torchrun's variables set by hand, each run's
# checkpoint compared bitwise with `--backend sim --device cuda --replicas W`; the same for one
# process with --gpus 0..W-1; DDP at 2 ranks again with NCCL_P2P_DISABLE=1 and with
# NCCL_SHM_DISABLE=1; a run checkpointed at 2 ranks and resumed at another world size against the
# sim doing the same; kill -9 of rank 1 mid-epoch (the other ranks must exit non-zero within 30 s,
# naming rank 1); epoch times with step graphs on and off beside `dptrain predict`'s for this GPU.
# Every run keeps NCCL_DEBUG=INFO output in its log; `nvidia-smi topo -m` goes to topo.txt. One
# results line per check in OUT/results.jsonl. Under 10 minutes at 2 GPUs.
#
# --gpus N: the GPUs to use (default: as many as nvidia-smi -L lists, at most 8); --steps S: optimizer
# steps of each compared run (default 60); --dry-run: print each command (and comparison) instead of
# running it; needs neither GPUs nor a build. Exit status: 0 when every check passed (a launcher
# that is not installed is a skipped check), 1 when one failed or fewer than 2 GPUs are visible,
# 2 for a bad argument.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CALLER=$PWD
cd "$ROOT" || exit 1
PROG=$(basename "$0")
. "$ROOT/examples/lib/args.sh"
BUILD=$ROOT/build-gpu OUT=$ROOT/out/gpu-check/multigpu DATA=${DP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
NG='' STEPS=60 DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build) need_value "$@"; BUILD=$2; shift ;;
        --out) need_value "$@"; OUT=$2; shift ;;
        --data) need_value "$@"; DATA=$2; shift ;;
        --gpus) need_value "$@"; NG=$2; shift ;;
        --steps) need_value "$@"; STEPS=$2; shift ;;
        --dry-run) DRY=1 ;;
        -h|--help) sed -n 2,21p "$ROOT/examples/gpu/multigpu.sh"; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
    shift
done
[ -z "$NG" ] || need_uint --gpus "$NG" 2
need_uint --steps "$STEPS" 1
need_nonempty --out "$OUT"
need_nonempty --build "$BUILD"
[[ $OUT == /* ]] || OUT=$CALLER/$OUT
[[ $BUILD == /* ]] || BUILD=$CALLER/$BUILD
D=$BUILD/dptrain

if [ -z "$NG" ]; then
    if [ $DRY = 1 ]; then
        NG=2
    else
        NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
        [ "$NG" -ge 2 ] || nothing_measured "nvidia-smi -L lists $NG GPU(s); the multigpu checks need 2 or more"
        [ "$NG" -le 8 ] || NG=8
    fi
fi
if [ $DRY = 0 ]; then
    [ -x "$D" ] || { echo "$PROG: no dptrain at $D: build first (examples/gpu/check.sh --phases build)" >&2; exit 1; }
    "$D" --version 2>&1 | grep -q 'nccl (' || { echo "$PROG: $D was built without NCCL" >&2; exit 1; }
fi
mkdir -p "$OUT/logs" "$OUT/ckpt" || exit 1
RES=$OUT/results.jsonl
: > "$RES"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_DEBUG=INFO
FAILED=0 PORT=$((29500 + $$ % 1000))

json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
# result CHECK STATUS SECONDS DETAIL: one line of OUT/results.jsonl, and one on the terminal
result() {
    [ $DRY = 1 ] && return 0
    printf '{"who":"multigpu","check":"%s","status":"%s","seconds":%s,"detail":%s}\n' "$1" "$2" "$3" \
        "$(json_str "$4")" >> "$RES"
    printf '%-40s %-8s %5s s  %s\n' "$1" "$2" "$3" "$4"
    case $2 in pass|skipped) ;; *) FAILED=1 ;; esac
}
# run NAME CMD...: CMD with its output in logs/NAME.log (at most 300 s); its exit status. Dry: printed.
run() {
    local name=$1
    shift
    if [ $DRY = 1 ]; then
        echo "[$name] $*"
        return 0
    fi
    timeout 300 "$@" > "$OUT/logs/$name.log" 2>&1
}
# The checkpoints' tensor bytes (after the safetensors header, whose metadata names the run's world).
same_tensors() {
    [ $DRY = 1 ] && { echo "[compare] $1 $2"; return 0; }
    python3 - "$1" "$2" <<'PY'
import struct, sys
def data(p):
    b = open(p, 'rb').read()
    return b[8 + struct.unpack('<Q', b[:8])[0]:]
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}

# The flags of a compared case (DDP, DP, SyncBN, accumulation) and of every run.
case_flags() {
    case $1 in
        ddp) echo "--model lenet" ;;
        dp) echo "--model lenet --mode dp" ;;
        syncbn) echo "--model lenet-bn --sync-bn" ;;
        acc2) echo "--model lenet --accumulate 2" ;;
    esac
}
COMMON=(--data "$DATA" --epochs 1 --batch-size 64 --seed 1 --threads 2 --no-progress)

# launch KIND W NAME FLAGS...: W ranks of `dptrain train --backend nccl FLAGS` under a launcher
launch() {
    local kind=$1 w=$2 name=$3
    shift 3
    case $kind in
        torchrun) run "$name" torchrun --nproc-per-node "$w" --master-port $((PORT++)) --no-python "$D" -- train \
                      --backend nccl "$@" ;;
        mpirun) run "$name" mpirun --oversubscribe --bind-to none -np "$w" "$D" train --backend nccl "$@" ;;
        gpus) run "$name" "$D" train --backend nccl --gpus "$(seq -s, 0 $((w - 1)))" "$@" ;;
        hand)
            if [ $DRY = 1 ]; then
                echo "[$name] for r in 0..$((w - 1)): RANK=r WORLD_SIZE=$w LOCAL_RANK=r LOCAL_WORLD_SIZE=$w" \
                    "MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT $D train --backend nccl $* &"
                PORT=$((PORT + 1))
                return 0
            fi
            local pids=() r rc=0 port=$((PORT++))
            for ((r = 0; r < w; r++)); do
                RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
                    timeout 300 "$D" train --backend nccl "$@" > "$OUT/logs/$name.rank$r.log" 2>&1 &
                pids+=($!)
            done
            for r in "${pids[@]}"; do wait "$r" || rc=1; done
            cat "$OUT"/logs/"$name".rank*.log > "$OUT/logs/$name.log"
            return $rc ;;
    esac
}

# A launcher that is not here is a skipped check, not a failure.
have_launcher() {
    [ $DRY = 1 ] && return 0
    case $1 in
        torchrun) command -v torchrun > /dev/null ;;
        mpirun) command -v mpirun > /dev/null && "$D" --version 2>&1 | grep -q 'mpi (' ;;
        *) return 0 ;;
    esac
}

# compare KIND W CASE [TAG]: the launch's checkpoint against the sim's at W replicas (TAG: in its name)
compare() {
    local kind=$1 w=$2 c=$3 t0=$SECONDS name=$1-$2-$3${4:+-$4}
    if ! have_launcher "$kind"; then
        result "$name" skipped 0 "$kind is not installed (or dptrain has no MPI)"
        return
    fi
    # shellcheck disable=SC2046 # the case's flags are words
    if ! launch "$kind" "$w" "$name" "${COMMON[@]}" --max-steps "$STEPS" $(case_flags "$c") \
            --save "$OUT/ckpt/$name.safetensors" --log-file "$OUT/logs/$name.jsonl"; then
        result "$name" FAIL $((SECONDS - t0)) "the run failed: $(grep -h 'dptrain:' "$OUT/logs/$name.log" 2>/dev/null | head -1)"
    elif same_tensors "$OUT/ckpt/sim-$w-$c.safetensors" "$OUT/ckpt/$name.safetensors"; then
        result "$name" pass $((SECONDS - t0)) "bitwise equal to --backend sim --device cuda --replicas $w"
    else
        result "$name" FAIL $((SECONDS - t0)) "the checkpoint differs from --backend sim --device cuda --replicas $w"
    fi
}

# the sim reference of case C at W replicas
reference() {
    local w=$1 c=$2 t0=$SECONDS
    # shellcheck disable=SC2046
    run "sim-$w-$c" "$D" train --backend sim --device cuda --replicas "$w" "${COMMON[@]}" --max-steps "$STEPS" \
        $(case_flags "$c") --save "$OUT/ckpt/sim-$w-$c.safetensors" ||
        result "sim-$w-$c" FAIL $((SECONDS - t0)) "the reference run failed (logs/sim-$w-$c.log)"
}

[ $DRY = 1 ] || { nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; nvidia-smi -L >> "$OUT/topo.txt" 2>&1; }
[ $DRY = 1 ] && echo "[topology] nvidia-smi topo -m > $OUT/topo.txt"

t0=$SECONDS
if run ctest-nccl ctest --test-dir "$BUILD" -L nccl --output-on-failure --timeout 300; then
    result ctest-nccl pass $((SECONDS - t0)) "$(grep -h 'tests passed' "$OUT/logs/ctest-nccl.log" 2>/dev/null)"
else
    result ctest-nccl FAIL $((SECONDS - t0)) "$(grep -h 'tests failed\|tests passed' "$OUT/logs/ctest-nccl.log")"
fi

WORLDS=2
[ "$NG" -ge 3 ] && WORLDS+=" 3"
[ "$NG" -gt 3 ] && WORLDS+=" $NG"
for w in $WORLDS; do
    for c in ddp dp syncbn acc2; do
        reference "$w" "$c"
        for kind in torchrun mpirun hand gpus; do compare "$kind" "$w" "$c"; done
    done
done

# transports: point-to-point over the host (no P2P), and the network path on one machine (no SHM)
for var in NCCL_P2P_DISABLE NCCL_SHM_DISABLE; do
    export "$var=1"
    [ $DRY = 1 ] && echo "[env] $var=1 for the next run"
    compare hand 2 ddp "$var"
    unset "$var"
done

# resume at another world size: an epoch at 2 ranks, then the second at RW ranks, against the sim
RW=$([ "$NG" -ge 4 ] && echo 4 || echo 1)
t0=$SECONDS
rm -rf "$OUT/ckpt/resume-nccl" "$OUT/ckpt/resume-sim"
ok=1
run resume-sim-a "$D" train --backend sim --device cuda --replicas 2 "${COMMON[@]}" --checkpoint "$OUT/ckpt/resume-sim" || ok=0
run resume-sim-b "$D" train --backend sim --device cuda --replicas "$RW" "${COMMON[@]}" --epochs 2 \
    --resume "$OUT/ckpt/resume-sim" --save "$OUT/ckpt/resume-sim.safetensors" || ok=0
launch hand 2 resume-nccl-a "${COMMON[@]}" --checkpoint "$OUT/ckpt/resume-nccl" || ok=0
launch hand "$RW" resume-nccl-b "${COMMON[@]}" --epochs 2 --resume "$OUT/ckpt/resume-nccl" \
    --save "$OUT/ckpt/resume-nccl.safetensors" || ok=0
if [ $ok = 0 ]; then
    result "resume-2-to-$RW" FAIL $((SECONDS - t0)) "a run failed (logs/resume-*.log)"
elif same_tensors "$OUT/ckpt/resume-sim.safetensors" "$OUT/ckpt/resume-nccl.safetensors"; then
    result "resume-2-to-$RW" pass $((SECONDS - t0)) "an epoch at 2 ranks, one at $RW: bitwise the sim's"
else
    result "resume-2-to-$RW" FAIL $((SECONDS - t0)) "resumed at $RW ranks, the checkpoint differs from the sim's"
fi

# kill -9 of rank 1 mid-epoch: every other rank exits non-zero within 30 s, naming rank 1
t0=$SECONDS
if [ $DRY = 1 ]; then
    echo "[kill] $NG ranks by hand (--epochs 3), kill -9 of rank 1 once rank 0 logged a step; the others must exit non-zero within 30 s naming rank 1"
else
    pids=() port=$((PORT++))
    for ((r = 0; r < NG; r++)); do
        RANK=$r WORLD_SIZE=$NG LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NG MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout 300 "$D" train --backend nccl "${COMMON[@]}" --epochs 3 --log-file "$OUT/logs/kill.rank$r.jsonl" \
            > "$OUT/logs/kill.rank$r.log" 2>&1 &
        pids+=($!)
    done
    # rank 0 writes the log: once it has a step, every rank is mid-epoch
    for _ in $(seq 600); do grep -q '"event":"step"' "$OUT/logs/kill.rank0.jsonl" 2>/dev/null && break; sleep 0.1; done
    kill -9 "${pids[1]}"
    killed=$SECONDS bad=
    for ((r = 0; r < NG; r++)); do
        [ $r = 1 ] && continue
        wait "${pids[$r]}" && bad+=" rank $r exited 0;"
        grep -q 'rank 1\b\|ranks 1' "$OUT/logs/kill.rank$r.log" || bad+=" rank $r did not name rank 1;"
    done
    wait "${pids[1]}" 2>/dev/null
    took=$((SECONDS - killed))
    [ $took -le 30 ] || bad+=" the others took $took s;"
    if [ -z "$bad" ]; then
        result kill-rank-1 pass $((SECONDS - t0)) "the others ended in $took s: $(grep -h 'dptrain:' "$OUT/logs/kill.rank0.log" | head -1 | cut -c1-200)"
    else
        result kill-rank-1 FAIL $((SECONDS - t0)) "$bad"
    fi
fi

# epoch times: a full epoch each, graphs on and off, beside the overhead model's prediction
epoch_s() { sed -n 's/.*"event":"epoch".*"seconds":\([0-9.]*\).*/\1/p' "$1" 2>/dev/null | tail -1; }
# shellcheck disable=SC2086 # $gf: no word, or --no-graph
for g in graph no-graph; do
    gf=$([ $g = no-graph ] && echo --no-graph)
    run "time-sim-$NG-$g" "$D" train --backend sim --device cuda --replicas "$NG" "${COMMON[@]}" $gf \
        --log-file "$OUT/logs/time-sim-$NG-$g.jsonl"
    launch hand "$NG" "time-nccl-$NG-$g" "${COMMON[@]}" $gf --log-file "$OUT/logs/time-nccl-$NG-$g.jsonl"
    launch gpus "$NG" "time-gpus-$NG-$g" "${COMMON[@]}" $gf --log-file "$OUT/logs/time-gpus-$NG-$g.jsonl"
done
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $gpu in *H100*|*H200*) preset=h100 ;; *4090*) preset=rtx4090 ;; *3090*) preset=rtx3090 ;; *T4*) preset=t4 ;; *) preset= ;; esac
topo=pcie4
grep -q 'NV[0-9]' "$OUT/topo.txt" 2>/dev/null && topo=nvlink4
[ $DRY = 1 ] && preset=h100 topo=nvlink4
if [ -n "$preset" ]; then
    run predict "$D" predict --model lenet --batch-size 64 --replicas "$NG" --topology "$topo" --compute "$preset" \
        --log-file "$OUT/logs/predict.jsonl"
fi
if [ $DRY = 0 ]; then
    pred=$(grep '"mode":"ddp"' "$OUT/logs/predict.jsonl" 2>/dev/null | grep "\"devices\":$NG," |
           sed -n 's/.*"epoch_s":\([0-9.e+-]*\).*/\1/p' | head -1)
    line="sim $(epoch_s "$OUT/logs/time-sim-$NG-graph.jsonl")/$(epoch_s "$OUT/logs/time-sim-$NG-no-graph.jsonl") s"
    line+=", $NG ranks $(epoch_s "$OUT/logs/time-nccl-$NG-graph.jsonl")/$(epoch_s "$OUT/logs/time-nccl-$NG-no-graph.jsonl") s"
    line+=", --gpus $(epoch_s "$OUT/logs/time-gpus-$NG-graph.jsonl")/$(epoch_s "$OUT/logs/time-gpus-$NG-no-graph.jsonl") s"
    line+=" (graphs on/off); predicted (${preset:-no preset for $gpu}, $topo): ${pred:-none} s"
    result epoch-times pass 0 "$line"
fi
exit $FAILED
