#!/usr/bin/env bash
# How often control crosses between src/train/ and src/exec/ in one training micro-step: every call
# from a function of one folder to a function of the other (the executor's verbs, its accessors, and
# the callbacks it makes into a strategy), counted by callgrind over a run of S2 steps less one of S1,
# divided by S2 - S1, so that set-up, evaluation and teardown cancel out. Prints the calls per step,
# caller -> callee, and their total.
# Usage: crossings.sh BUILD [MODE] [--max N]
#   BUILD: a build directory whose dptrain has debug information (-DCMAKE_BUILD_TYPE=RelWithDebInfo),
#   MODE: ddp (default) or dp. The run: LeNet-BN (its BN buffers are broadcast), 2 replicas (sim), one
#   thread, synthetic data, one micro-step per step (--accumulate 1), one gradient bucket.
#   --max N: exit 1 when the total is above N.
# Needs valgrind (callgrind) and python3.
set -euo pipefail
BUILD=${1:?usage: crossings.sh BUILD [ddp|dp] [--max N]}
MODE=ddp
MAX=
shift
while [ $# -gt 0 ]; do
    case "$1" in
        --max) MAX=$2; shift 2 ;;
        ddp|dp) MODE=$1; shift ;;
        *) echo "crossings.sh: $1: unknown argument; usage: crossings.sh BUILD [ddp|dp] [--max N]" >&2; exit 2 ;;
    esac
done
BIN=$BUILD/dptrain
[ -x "$BIN" ] || { echo "crossings.sh: $BIN: not found; build the dptrain target first" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "crossings.sh: valgrind: not found; install valgrind" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
S1=2 S2=4
for s in $S1 $S2; do
    valgrind --tool=callgrind --compress-strings=no --compress-pos=no --callgrind-out-file="$TMP/cg.$s" \
        "$BIN" train --model lenet-bn --dataset synthetic --shape 3x32x32 --samples 512 --batch-size 64 \
        --replicas 2 --threads 1 --workers 0 --epochs 1 --max-steps "$s" --mode "$MODE" --chunks 2 \
        > "$TMP/out.$s" 2>&1 || { cat "$TMP/out.$s" >&2; exit 1; }
done
python3 - "$TMP/cg.$S1" "$TMP/cg.$S2" "$S1" "$S2" "$MAX" << 'EOF'
import sys, collections

def side(path):
    if '/src/train/' in path: return 'train'
    if '/src/exec/' in path: return 'exec'
    return None

def edges(fname):
    """(caller, callee) -> calls, for calls between src/train/ and src/exec/."""
    out = collections.Counter()
    fl = fn = ''
    cfl = None
    caller_side = None
    with open(fname) as f:
        for line in f:
            if line.startswith('fl='):
                fl = line[3:].strip()
            elif line.startswith('fn='):
                fn = line[3:].strip()
                caller_side = side(fl)
                cfl = None
            elif line.startswith('cfl=') or line.startswith('cfi='):
                cfl = line[4:].strip()
            elif line.startswith('cfn='):
                cfn = line[4:].strip()
            elif line.startswith('calls='):
                n = int(line[6:].split()[0])
                callee_side = side(cfl if cfl is not None else fl)
                if caller_side and callee_side and caller_side != callee_side:
                    out[(caller_side + ':' + fn, callee_side + ':' + cfn)] += n
                cfl = None
    return out

a, b = edges(sys.argv[1]), edges(sys.argv[2])
steps = int(sys.argv[4]) - int(sys.argv[3])
total = 0
for k in sorted(set(a) | set(b)):
    d = (b[k] - a[k]) / steps
    if d:
        print('%6.2f  %s -> %s' % (d, k[0], k[1]))
        total += d
print('%6.2f  crossings per micro-step' % total)
mx = sys.argv[5]
if mx and total > float(mx):
    print('crossings.sh: %.2f crossings per micro-step, above the bound %s' % (total, mx), file=sys.stderr)
    sys.exit(1)
EOF
