#!/usr/bin/env bash
# dptrain --device cuda against PyTorch on the same GPU, in one run, interleaved in rounds
# (examples/pytorch/gpu_reference.py is the peer): LeNet / Fashion-MNIST, LeNet-BN on 50,000 random
# 3x32x32, ResNet-18 on random 3x224x224 at batch 256 (fp32 and TF32; PyTorch also bf16 AMP with
# channels_last), the sim with 4 replicas against 1 on one GPU, and with --accuracy the test accuracy
# of 10 LeNet epochs on the GPU and on the CPU for seeds 1, 2, 3.
# dptrain's figure is the median of epochs 2.. over all rounds, with the range; PyTorch's the median
# of its timed repeats over all rounds. Writes one JSON line per case and round (OUT/results.jsonl)
# and a markdown table (OUT/gpu_vs_pytorch.md) with the machine, the date and the commands.
#
#   examples/bench/gpu_vs_pytorch.sh [--data DIR] [--out DIR] [--rounds R] [--epochs E>=2]
#                                    [--cases lenet,lenet-bn,resnet18,replicas | none] [--accuracy] [--skip-pytorch]
# Environment: DPTRAIN (default build/dptrain), PYTHON (default python3). --cases none: --accuracy only.
# Exit status: 0 when every case ran; 1 when a case or the PyTorch peer failed (the table holds the
# rest) or nothing was measured (no GPU: every case fails); 2 for a bad argument.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
PYTHON=${PYTHON:-python3}
DATA=/usr/share/datasets/fashion-mnist
OUT=$ROOT/out/gpu-vs-pytorch
ACC=0 PEER=1 ROUNDS=2 EPOCHS=3 CASES=lenet,lenet-bn,resnet18,replicas
me=$(basename "$0") PROG=$(basename "$0")
. "$ROOT/examples/lib/args.sh"
while [ $# -gt 0 ]; do
    case "$1" in
    --data|--out|--rounds|--epochs|--cases)
        need_value "$@"
        case "$1" in
        --data) DATA=$2 ;;
        --out) OUT=$2 ;;
        --rounds) ROUNDS=$2 ;;
        --epochs) EPOCHS=$2 ;;
        --cases) CASES=$2 ;;
        esac
        shift ;;
    --accuracy) ACC=1 ;;
    --skip-pytorch) PEER=0 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) unknown_arg "$1" ;;
    esac
    shift
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
if [ "$CASES" = none ]; then
    [ $ACC = 1 ] || die_usage "--cases: none without --accuracy measures nothing"
else
    need_choices --cases "$CASES" lenet lenet-bn resnet18 replicas
fi
need_nonempty --data "$DATA"
need_nonempty --out "$OUT"
[ -x "$DPTRAIN" ] || { echo "$me: no dptrain at $DPTRAIN (build with -DDP_WITH_CUDA=ON, or set DPTRAIN)" >&2; exit 1; }
mkdir -p "$OUT/logs"
RES=$OUT/results.jsonl
: > "$RES"
has() { [[ ",$CASES," == *",$1,"* ]]; }

# one dptrain case: name, then dptrain arguments; appends {"who":"dptrain",...} with every epoch >= 2
run() {
    local name=$1 r=$2
    shift 2
    local log=$OUT/logs/$name-r$r.jsonl envs=()
    # a case named *-gemm runs the convolutions as im2col + cuBLAS instead of cuDNN
    [[ $name == *-gemm ]] && envs=(env DPTRAIN_CONV=gemm)
    rm -f "$log"
    RAN=$((RAN + 1))
    if ! "${envs[@]}" "$DPTRAIN" train --no-progress --quiet --log "$log" "$@" > "$OUT/logs/$name-r$r.out" 2>&1; then
        echo "$me: dptrain case $name failed:" >&2; tail -5 "$OUT/logs/$name-r$r.out" >&2
        printf '{"who":"dptrain","case":"%s","round":%s,"error":true}\n' "$name" "$r" >> "$RES"
        FAILED=$((FAILED + 1))
        return 0
    fi
    if ! "$PYTHON" - "$log" "$name" "$r" "${envs[*]:1} dptrain train $*" "$ROOT/" >> "$RES" <<'PY'
import json, sys
log, name, r, cmd, root = sys.argv[1:]
cmd = cmd.replace(root, "")  # paths as a user of the repository would type them
lines = [json.loads(l) for l in open(log) if l.strip()]
ep = [l for l in lines if l.get("event") == "epoch"]
if not ep:
    sys.exit("gpu_vs_pytorch.sh: dptrain case %s logged no epoch (%s)" % (name, log))
fin = [l for l in lines if l.get("event") == "final"]
acc = fin[-1].get("test_acc") if fin else None
print(json.dumps({"who": "dptrain", "case": name, "round": int(r), "command": cmd.strip(),
                  "epoch_seconds": [e["seconds"] for e in ep[1:]], "images": ep[-1]["images_per_s"] * ep[-1]["seconds"],
                  "test_acc": acc}))
PY
    then
        FAILED=$((FAILED + 1))
        return 0
    fi
}
RAN=0 FAILED=0 PEER_FAILED=0

LENET=(--device cuda --data "$DATA" --epochs "$EPOCHS" --batch-size 64 --lr 0.01 --momentum 0.9)
BN=(--device cuda --model lenet-bn --dataset synthetic --shape 3x32x32 --samples 50000 --epochs "$EPOCHS"
    --batch-size 64 --lr 0.01 --momentum 0.9)
RN=(--device cuda --model resnet18 --dataset synthetic --shape 3x224x224 --samples 2560 --epochs "$EPOCHS"
    --batch-size 256 --lr 0.02 --momentum 0.9 --weight-decay 1e-4 --nesterov)
for r in $(seq "$ROUNDS"); do
    if has lenet; then
        run lenet "$r" "${LENET[@]}"
        run lenet-nograph "$r" "${LENET[@]}" --no-graph
        run lenet-chunks1 "$r" "${LENET[@]}" --chunks 1
    fi
    if has replicas; then
        run lenet-r1 "$r" "${LENET[@]}" --replicas 1
        run lenet-r4 "$r" "${LENET[@]}" --replicas 4
        run lenet-r4-dp "$r" "${LENET[@]}" --replicas 4 --mode dp
    fi
    if has lenet-bn; then
        run lenet-bn "$r" "${BN[@]}"
        run lenet-bn-chunks1 "$r" "${BN[@]}" --chunks 1
    fi
    if has resnet18; then
        run resnet18-fp32 "$r" "${RN[@]}"
        run resnet18-tf32 "$r" "${RN[@]}" --tf32
        run resnet18-tf32-chunks1 "$r" "${RN[@]}" --tf32 --chunks 1
    fi
    if [ $PEER = 1 ]; then
        pc=()
        for c in lenet lenet-bn resnet18; do has $c && pc+=("$c"); done
        if [ ${#pc[@]} -gt 0 ]; then
            pcs=$(IFS=,; echo "${pc[*]}")
            if "$PYTHON" "$ROOT/examples/pytorch/gpu_reference.py" --data "$DATA" --cases "$pcs" \
                    --epochs $((EPOCHS - 1)) > "$OUT/logs/pytorch-r$r.jsonl" 2> "$OUT/logs/pytorch-r$r.err"; then
                "$PYTHON" -c '
import json, sys
import torch
for l in open(sys.argv[1]):
    d = json.loads(l)
    d.update(who="pytorch", version=torch.__version__, round=int(sys.argv[2]),
             command="examples/pytorch/gpu_reference.py --cases " + sys.argv[3])
    print(json.dumps(d))' "$OUT/logs/pytorch-r$r.jsonl" "$r" "$pcs" >> "$RES" || PEER_FAILED=$((PEER_FAILED + 1))
            else
                echo "$me: the PyTorch peer failed:" >&2; tail -5 "$OUT/logs/pytorch-r$r.err" >&2
                PEER_FAILED=$((PEER_FAILED + 1))
            fi
        fi
    fi
done

if [ $ACC = 1 ]; then
    for seed in 1 2 3; do
        for dev in cuda cpu; do
            run "accuracy-$dev-seed$seed" 1 --device $dev --data "$DATA" --epochs 10 --seed $seed
        done
    done
fi

# the table of what was measured; none at all is a failure, not an empty table
rc=0
"$PYTHON" "$ROOT/examples/gpu/gpu_tables.py" bench "$RES" \
    --machine "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'), $(nproc) cores" \
    --version "$("$DPTRAIN" --version | head -1)" > "$OUT/gpu_vs_pytorch.md" 2> "$OUT/logs/tables.err" || rc=$?
# exit 1 with "nothing was measured" is said below in this script's words; anything else as it is
if [ $rc != 0 ] && ! grep -q 'nothing was measured' "$OUT/logs/tables.err"; then cat "$OUT/logs/tables.err" >&2; exit 1; fi
if [ $rc != 0 ]; then
    rm -f "$OUT/gpu_vs_pytorch.md"
    why="$FAILED of $RAN dptrain case(s) failed"
    [ $PEER_FAILED = 0 ] || why+=", the PyTorch peer in $PEER_FAILED round(s)"
    nothing_measured "$why (no GPU?); see $OUT/logs"
fi
cat "$OUT/gpu_vs_pytorch.md"
if [ $FAILED -gt 0 ] || [ $PEER_FAILED -gt 0 ]; then
    why="$FAILED of $RAN dptrain case(s) failed"
    [ $PEER_FAILED = 0 ] || why+=", the PyTorch peer in $PEER_FAILED round(s)"
    echo "$me: $why; the table holds the rest; see $OUT/logs" >&2
    exit 1
fi
