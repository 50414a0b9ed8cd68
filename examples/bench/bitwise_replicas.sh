#!/usr/bin/env bash
# "N replicas = one device", checked with bytes: trains LeNet on Fashion-MNIST (the packaged data
# set) for one epoch with --replicas 1, 2, 4 and 8 (sim) and, if MPI is built, mpirun -np 2,
# saves a checkpoint of each, and compares the parameter and momentum bytes of every one with
# the --replicas 1 checkpoint. Prints one line per run and exits 1 if any differs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DPTRAIN=${DPTRAIN:-$ROOT/build/dptrain}
EPOCHS=1 THREADS=2 OUT="$ROOT/out/bitwise" EXTRA=""
. "$ROOT/examples/lib/args.sh"
. "$ROOT/examples/bench/lib.sh"

usage() {
    echo "usage: $(basename "$0") [--epochs E] [--threads T] [--out DIR] [--extra 'FLAGS']"
    echo "  DPTRAIN: the binary (default build/dptrain); FLAGS are added to every run (e.g. '--model lenet-bn --sync-bn')"
}
while [ $# -gt 0 ]; do
    case "$1" in
        --epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        --threads) need_value "$@"; THREADS=$2; shift 2 ;;
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --extra) need_value_any "$@"; EXTRA=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --epochs "$EPOCHS" 1
need_uint --threads "$THREADS" 1
need_nonempty --out "$OUT"
need_dptrain
mkdir -p "$OUT"

# The checkpoint's tensor bytes (dptrain's DPCKPT01 layout: all of it; safetensors: after the
# header, whose metadata may name the run's own replica count).
tensor_bytes_equal() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
def data(p):
    b = open(p, 'rb').read()
    if b[:8] == b'DPCKPT01':
        return b
    n = struct.unpack('<Q', b[:8])[0]
    return b[8 + n:]
sys.exit(0 if data(sys.argv[1]) == data(sys.argv[2]) else 1)
PY
}

run() { # name, then flags of this run; LAUNCH (an array) may hold a launcher such as mpirun
    local name=$1; shift
    local t0=$SECONDS
    if ! "${LAUNCH[@]}" "$DPTRAIN" train --epochs "$EPOCHS" --threads "$THREADS" --no-progress $EXTRA "$@" \
            --save "$OUT/$name.ckpt" --log "$OUT/$name.jsonl" > "$OUT/$name.out" 2>&1; then
        echo "$name: dptrain failed:" >&2; tail -5 "$OUT/$name.out" >&2
        [ "$name" != r1 ] || nothing_measured "the reference run (--replicas 1) failed; see $OUT/r1.out"
        status=1
        return 0
    fi
    local acc
    acc=$(sed -n 's/.*"event":"final".*"test_acc":\([0-9.]*\).*/\1/p' "$OUT/$name.jsonl")
    if [ "$name" = r1 ]; then
        echo "$name: test accuracy $acc ($((SECONDS - t0)) s), the reference"
    elif tensor_bytes_equal "$OUT/r1.ckpt" "$OUT/$name.ckpt"; then
        echo "$name: test accuracy $acc ($((SECONDS - t0)) s), parameters and momentum identical to r1"
    else
        echo "$name: test accuracy $acc: parameters DIFFER from r1" >&2
        status=1
    fi
}

status=0
LAUNCH=()
for n in 1 2 4 8; do run "r$n" --replicas "$n"; done
if "$DPTRAIN" --version | grep -q 'mpi (' && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    LAUNCH=(mpirun --oversubscribe --bind-to none -np 2)
    THREADS=1
    run mpi2 --backend mpi
fi
exit $status
