#!/usr/bin/env bash
# dptrain --device cuda against PyTorch on the same GPU, in one run (examples/pytorch/gpu_reference.py
# is the peer): LeNet / Fashion-MNIST, LeNet-BN on 50,000 random 3x32x32, ResNet-18 on random
# 3x224x224 at batch 256 (fp32 and TF32), the sim with 4 replicas against 1 on one GPU, and with
# --accuracy the test accuracy of 10 LeNet epochs on the GPU and on the CPU for 3 seeds.
# Prints a markdown table (also OUT/gpu_vs_pytorch.md) with the machine, the date and the commands.
#
#   examples/bench/gpu_vs_pytorch.sh [--data DIR] [--out DIR] [--logs DIR] [--accuracy] [--skip-pytorch]
# (--out: the markdown; --logs: every run's --log file, default the --out directory)
# Environment: DPTRAIN (default build/dptrain), PYTHON (default python3).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
PYTHON=${PYTHON:-python3}
DATA=/usr/share/datasets/fashion-mnist
OUT=$ROOT/out/gpu-vs-pytorch
LOGS=
ACC=0
PEER=1
while [ $# -gt 0 ]; do
    case "$1" in
    --data) DATA=$2; shift ;;
    --out) OUT=$2; shift ;;
    --logs) LOGS=$2; shift ;;
    --accuracy) ACC=1 ;;
    --skip-pytorch) PEER=0 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
LOGS=${LOGS:-$OUT}
mkdir -p "$OUT" "$LOGS"
MD=$OUT/gpu_vs_pytorch.md
: > "$LOGS/dptrain.jsonl"

# the last epoch's training seconds and images/s of a --log file
last_epoch() {
    "$PYTHON" - "$1" <<'PY'
import json, sys
ep = [json.loads(l) for l in open(sys.argv[1]) if '"event":"epoch"' in l]
fin = [json.loads(l) for l in open(sys.argv[1]) if '"event":"final"' in l]
e = ep[-1]
acc = fin[-1].get("test_acc", fin[-1].get("accuracy", "")) if fin else ""
print("%.4f %.1f %s" % (e["seconds"], e["images_per_s"], acc))
PY
}

run() { # name, then dptrain arguments
    local name=$1
    shift
    local log=$LOGS/$name.jsonl envs=() shown=
    # a case named *-gemm runs the convolutions as im2col + cuBLAS instead of cuDNN
    if [[ $name == *-gemm ]]; then envs=(env DPTRAIN_CONV=gemm); shown="DPTRAIN_CONV=gemm "; fi
    rm -f "$log"
    "${envs[@]}" "$DPTRAIN" train --no-progress --quiet --log "$log" "$@"
    read -r s ips acc < <(last_epoch "$log")
    echo "{\"case\":\"$name\",\"seconds\":$s,\"images_per_s\":$ips}" >> "$LOGS/dptrain.jsonl"
    printf '| dptrain | %s | %s | %s | `%sdptrain train %s` |\n' "$name" "$s" "$ips" "$shown" "$*" | tee -a "$ROWS"
}

ROWS=$LOGS/rows.md
: > "$ROWS"
LENET=(--device cuda --data "$DATA" --epochs 2 --batch-size 64 --lr 0.01 --momentum 0.9)
run lenet-chunks8 "${LENET[@]}"
run lenet-chunks8-gemm "${LENET[@]}"
run lenet-chunks8-nograph "${LENET[@]}" --no-graph
run lenet-chunks1 "${LENET[@]}" --chunks 1
run lenet-r1 "${LENET[@]}" --replicas 1
run lenet-r4 "${LENET[@]}" --replicas 4
run lenet-r4-chunks4 "${LENET[@]}" --replicas 4 --chunks 4
run lenet-r4-dp "${LENET[@]}" --replicas 4 --mode dp
BN=(--device cuda --model lenet-bn --dataset synthetic --shape 3x32x32 --samples 50000 --epochs 2 --batch-size 64
    --lr 0.01 --momentum 0.9)
run lenet-bn-chunks8 "${BN[@]}"
run lenet-bn-chunks1 "${BN[@]}" --chunks 1
RN=(--device cuda --model resnet18 --dataset synthetic --shape 3x224x224 --samples 2560 --epochs 2 --batch-size 256
    --lr 0.02 --momentum 0.9 --weight-decay 1e-4 --nesterov)
run resnet18-fp32 "${RN[@]}"
run resnet18-fp32-gemm "${RN[@]}"
run resnet18-fp32-chunks1 "${RN[@]}" --chunks 1
run resnet18-tf32 "${RN[@]}" --tf32
run resnet18-tf32-chunks1 "${RN[@]}" --tf32 --chunks 1

if [ $PEER = 1 ]; then
    "$PYTHON" "$ROOT/examples/pytorch/gpu_reference.py" --data "$DATA" | tee "$LOGS/pytorch.jsonl" |
        "$PYTHON" -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("| PyTorch %s | %s %s | %.4f | %.1f | `examples/pytorch/gpu_reference.py` |" % (
        __import__("torch").__version__, r["case"], r["way"], r["seconds"], r["images_per_s"]))' | tee -a "$ROWS"
fi

if [ $ACC = 1 ]; then
    for seed in 1 2 3; do
        for dev in cuda cpu; do
            log=$LOGS/acc-$dev-$seed.jsonl
            "$DPTRAIN" train --no-progress --quiet --device $dev --data "$DATA" --epochs 10 --seed $seed --log "$log"
            read -r s ips acc < <(last_epoch "$log")
            printf '| dptrain accuracy | %s seed %s | test acc %s | | `dptrain train --device %s --epochs 10 --seed %s` |\n' \
                "$dev" "$seed" "$acc" "$dev" "$seed" | tee -a "$ROWS"
        done
    done
fi

{
    echo "Machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no GPU'),"\
         "$(nproc) cores; $(date -u +%Y-%m-%d); $("$DPTRAIN" --version | head -1)"
    echo
    echo "| who | case | s/epoch (last of 2) | images/s | command |"
    echo "|---|---|---|---|---|"
    cat "$ROWS"
} > "$MD"
rm -f "$ROWS"
echo "written: $MD"
