#!/usr/bin/env bash
# nccl_memory.sh: `--backend nccl` at one rank on GPU 0 beside the sim on the same GPU, LeNet on
# synthetic data: NCCL's device memory as the run measured it at start (the config line's
# nccl_memory_init_mib, nccl_memory_warmup_mib, nccl_memory_reserved_mib; docs/gpu.md), the epoch
# times of both (at one rank NCCL steps are recorded as graphs, as the sim's: the times should match)
# and whether both ends are bitwise equal. Prints a line for each and appends one JSON line to
# OUT/results.jsonl. Exit 1 when a run fails, the config line has no NCCL memory figures, or the
# checkpoints differ.
#   examples/gpu/nccl_memory.sh [--build build-gpu] [--out DIR] [--epochs E]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD="$ROOT/build-gpu" OUT="$ROOT/out/gpu-check/nccl-memory" EPOCHS=3
. "$ROOT/examples/lib/args.sh"
while [ $# -gt 0 ]; do
    case "$1" in
        --build) need_value "$@"; BUILD=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --epochs) need_value "$@"; need_uint --epochs "$2" 1; EPOCHS=$2; shift 2 ;;
        -h|--help) sed -n 2,9p "$0"; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_nonempty --build "$BUILD"
need_nonempty --out "$OUT"
D=${DPTRAIN:-$BUILD/dptrain}
[ -x "$D" ] || { echo "$(basename "$0"): no dptrain at $D: build with -DDP_WITH_CUDA=ON first" >&2; exit 1; }
mkdir -p "$OUT" || exit 1
FLAGS=(train --device cuda --gpu 0 --model lenet --dataset synthetic --shape 1x28x28 --samples 60000 --batch-size 64
       --epochs "$EPOCHS" --seed 7 --no-progress)
rc=0
"$D" "${FLAGS[@]}" --backend nccl --log-file "$OUT/nccl.jsonl" --save "$OUT/nccl.ckpt" > "$OUT/nccl.log" 2>&1 || rc=1
"$D" "${FLAGS[@]}" --backend sim --log-file "$OUT/sim.jsonl" --save "$OUT/sim.ckpt" > "$OUT/sim.log" 2>&1 || rc=1
[ $rc = 0 ] || { echo "a run failed: see $OUT/nccl.log, $OUT/sim.log" >&2; tail -3 "$OUT/nccl.log" "$OUT/sim.log" >&2; }
python3 - "$OUT" "$rc" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" <<'PY'
import json, os, sys
out, rc, gpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def tensors(path):  # a safetensors file: its tensors' table and bytes, without the metadata (the flags differ)
    if not os.path.exists(path): return None
    b = open(path, "rb").read()
    n = int.from_bytes(b[:8], "little")
    head = json.loads(b[8:8 + n]); head.pop("__metadata__", None)
    return head, b[8 + n:]
a, b = tensors(os.path.join(out, "nccl.ckpt")), tensors(os.path.join(out, "sim.ckpt"))
same = a is not None and a == b
def read(name):
    cfg, epochs = {}, []
    path = os.path.join(out, name + ".jsonl")
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            if r.get("event") == "config": cfg = r
            if r.get("event") == "epoch": epochs.append(r["seconds"])
    return cfg, epochs
cfg, nccl_s = read("nccl")
_, sim_s = read("sim")
keys = ("nccl_memory_init_mib", "nccl_memory_warmup_mib", "nccl_memory_reserved_mib")
mem = {k: cfg.get(k) for k in keys}
med = lambda v: sorted(v)[len(v) // 2] if v else None
row = {"who": "nccl-memory", "gpu": gpu, "world": cfg.get("world"), **mem,
       "nccl_epoch_s": nccl_s, "sim_epoch_s": sim_s, "bitwise": bool(same)}
with open(os.path.join(out, "results.jsonl"), "a") as f: f.write(json.dumps(row) + "\n")
if any(v is None for v in mem.values()):
    print("nccl at world 1: the config line has no NCCL memory figures (%s)" % ", ".join(keys)); sys.exit(1)
print("nccl at world 1 on %s: NCCL's device memory measured at start: %.1f MiB for the communicator, %.1f MiB "
      "in the warm-up, %.1f MiB reserved" % (gpu, mem[keys[0]], mem[keys[1]], mem[keys[2]]))
if nccl_s and sim_s:
    print("epoch seconds (median of %d): nccl %.3f, sim %.3f (the first epoch included: %s / %s)"
          % (len(nccl_s), med(nccl_s), med(sim_s), " ".join("%.3f" % s for s in nccl_s), " ".join("%.3f" % s for s in sim_s)))
print("checkpoints %s" % ("bitwise equal" if same else "DIFFER"))
sys.exit(0 if same and rc == 0 else 1)
PY
