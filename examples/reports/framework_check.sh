#!/usr/bin/env bash
# examples/reports/framework_check.sh: the reports' multi-GPU PyTorch figures against dptrain's
# predictions from their own single-GPU figures (dptrain predict --measured-epoch, with PyTorch's
# DataParallel and DDP costs from a .framework file). Prints one markdown table: report, row, the
# report's figure, the prediction, the error, and whether each is faster than the one device.
# Nothing here is fitted on a report: the compute's shape comes from the device profiles in
# sim/presets, the links from the topology presets, the framework's costs from
# examples/bench/framework_costs.sh; the only inputs taken from a report are its own single-device
# time and its batch and data set sizes.
# usage: framework_check.sh [--framework F] [--out FILE]
#   --framework F  the .framework file or name (default pytorch-cpu, sim/presets/pytorch-cpu.framework)
#   --out FILE     also write the table there
# environment: DPTRAIN (default build/dptrain)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/examples/lib/args.sh"
fw=pytorch-cpu
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --framework) need_value "$@"; need_nonempty --framework "$2"; fw=$2; shift 2 ;;
        --out) need_value "$@"; need_nonempty --out "$2"; out=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
dptrain=${DPTRAIN:-$root/build/dptrain}
if [ ! -x "$dptrain" ]; then
    echo "framework_check.sh: no dptrain at $dptrain: build it first (cmake -S . -B build && cmake --build build -j2) or set DPTRAIN" >&2
    exit 1
fi
P=$root/sim/presets
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# report 002's machine: the pcie4 preset with 8 RTX 3090s (no NVLink, no P2P), as reports.py writes it
sed -e 's/^name .*/name pcie4-8x3090/' -e 's/^devices .*/devices 8/' -e 's/^device .*/device RTX-3090/' "$P/pcie4" \
    > "$tmp/pcie4-8x3090"
CIFAR="--dataset synthetic --shape 3x32x32 --samples 50000"   # CIFAR-10's shape and training set size
MNIST="--dataset synthetic --shape 1x28x28 --samples 60000"   # MNIST's
rows=$tmp/rows
: > "$rows"
# row REPORT "ROW" MODE DEVICES REPORTED_S ONE_DEVICE_S EPOCHS -- predict flags...: one row of the table
row() {
    local report=$1 name=$2 mode=$3 n=$4 reported=$5 single=$6 epochs=$7
    shift 8
    local log=$tmp/$report-$mode-$n-$RANDOM.jsonl
    "$dptrain" predict "$@" --framework "$fw" --log "$log" --quiet
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$report" "$name" "$mode" "$n" "$reported" "$single" "$epochs" "$log" >> "$rows"
}
# 000: LeNet-BN, CIFAR-10, 4x RTX 4090, one GPU 3.29 s an epoch at batch 64
c000="--model lenet-bn $CIFAR --topology pcie4 --compute $P/rtx4090-lenet-bn.profile --measured-epoch 3.29"
row 000 "DP, 4 GPUs, batch 64 in all (s/epoch)" dp 4 25.3 3.29 1 -- $c000 --batch-size 64
row 000 "DDP, 4 GPUs, 64 per GPU (s/epoch)" ddp 4 1.80 3.29 1 -- $c000 --batch-size 256 --measured-batch 64
# 002: LeNet, MNIST, 8x RTX 3090, NCCL, 64 per GPU, 10 epochs; one GPU 200.97 s
c002="--model lenet $MNIST --topology $tmp/pcie4-8x3090 --compute $P/rtx3090-lenet.profile --measured-epoch 20.097 --measured-batch 64"
row 002 "DDP, 2 GPUs (s, 10 epochs)" ddp 2 117.07 200.97 10 -- $c002 --batch-size 128
row 002 "DDP, 4 GPUs (s, 10 epochs)" ddp 4 170.21 200.97 10 -- $c002 --batch-size 256
row 002 "DDP, 8 GPUs (s, 10 epochs)" ddp 8 228.03 200.97 10 -- $c002 --batch-size 512
# 003: LeNet, MNIST, 8x H100, batch 32 in all (DDP: 32 // 8 per GPU), 10 epochs; baseline 73 s (0 loader workers)
c003="--model lenet $MNIST --topology nvlink4 --compute $P/h100-lenet.profile --batch-size 32"
row 003 "DDP, 8 GPUs, from the 0-worker baseline 73 s (s, 10 epochs)" ddp 8 26.11 73 10 -- $c003 --measured-epoch 7.3
row 003 "DDP, 8 GPUs, from the 4-worker baseline 18.47 s (DDP ran 4 workers) (s, 10 epochs)" ddp 8 26.11 18.47 10 -- \
    $c003 --measured-epoch 1.847
row 003 "DP, 8 GPUs, from the 0-worker baseline 73 s (s, 10 epochs)" dp 8 160.88 73 10 -- $c003 --measured-epoch 7.3
python3 - "$rows" "$fw" "$out" <<'EOF'
import json, sys
rows, fw, out = sys.argv[1], sys.argv[2], sys.argv[3]
lines = ["| report | row | report | predicted | error | report vs 1 GPU | predicted vs 1 GPU |",
         "|---|---|---:|---:|---:|---|---|"]
errs = {"ddp": [], "dp": []}
right = total = 0
for r in open(rows):
    rep, name, mode, n, reported, single, epochs, log = r.rstrip("\n").split("\t")
    n, reported, single, epochs = int(n), float(reported), float(single), int(epochs)
    pred = None
    for line in open(log):
        o = json.loads(line)
        if o.get("event") == "predict" and o["mode"] == mode and o["devices"] == n:
            pred = o["epoch_s"] * epochs
    err = 100 * (pred - reported) / reported
    errs[mode].append(abs(err))
    way = lambda t: "faster" if t < single else "slower"
    total += 1
    right += way(reported) == way(pred)
    lines.append(f"| {rep} | {name} | {reported:.2f} | {pred:.2f} | {err:+.0f} % | {way(reported)} | {way(pred)} |")
lines.append("")
lines.append(f"Direction right in {right} of {total} rows; |error| DDP: "
             + ", ".join(f"{e:.0f} %" for e in errs["ddp"]) + "; DP: " + ", ".join(f"{e:.0f} %" for e in errs["dp"])
             + f". Framework costs: {fw}.")
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
if out:
    open(out, "w").write(text)
EOF
