#!/usr/bin/env bash
# Two dptrain builds against each other on the same cases, interleaved (round 1: A then B on every
# case, round 2: the same, ...), so that a slow phase of the machine hits both: LeNet / Fashion-MNIST
# epochs at batch 64, epoch 1 of every run dropped, the median seconds per epoch of the rest with
# min-max, and the ratio B/A of the medians, as markdown. See --help.
set -euo pipefail

PROG=$(basename "$0")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$ROOT/examples/lib/args.sh"
usage() {
    cat <<EOF
Usage: $PROG --a BIN --b BIN [options] [--case 'FLAGS']...

Options:
      --a BIN, --b BIN   the two dptrain binaries (A: the reference)
      --case 'FLAGS'     a case: flags added to "train --epochs E --threads T" (repeatable; default:
                         '', '--replicas 4', '--mode dp --replicas 2')
  -r, --rounds R         rounds (default 5)
  -e, --epochs E         epochs per run (default 3; the first is dropped)
  -t, --threads T        threads (default 2)
  -h, --help             this text
EOF
}
A="" B="" ROUNDS=5 EPOCHS=3 THREADS=2 CASES=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --a) need_value "$@"; A=$2; shift 2 ;;
        --b) need_value "$@"; B=$2; shift 2 ;;
        --case) need_value_any "$@"; CASES+=("$2"); shift 2 ;;
        -r|--rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
        -e|--epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
        -t|--threads) need_value "$@"; THREADS=$2; shift 2 ;;
        *) unknown_arg "$1" ;;
    esac
done
need_uint --rounds "$ROUNDS" 1
need_uint --epochs "$EPOCHS" 2 "epoch 1 is dropped"
need_uint --threads "$THREADS" 1
for w in a b; do
    bin=$A; [ $w = b ] && bin=$B
    [ -n "$bin" ] || die_usage "--$w: missing; name the two dptrain binaries with --a and --b"
    if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then die_usage "--$w: '$bin' is not an executable file"; fi
done
[ ${#CASES[@]} -gt 0 ] || CASES=("" "--replicas 4" "--mode dp --replicas 2")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# seconds of epochs 2.. of one run, one per line
run() {  # bin case_index flags
    local log="$TMP/run.jsonl"
    # shellcheck disable=SC2086
    "$1" train --epochs "$EPOCHS" --threads "$THREADS" --quiet --log "$log" $3 >"$TMP/out" 2>&1 ||
        { echo "$PROG: $1 failed:" >&2; cat "$TMP/out" >&2; exit 1; }
    local s
    s=$(grep '"event":"epoch"' "$log" | tail -n +2 | grep -o '"seconds":[0-9.e-]*' | cut -d: -f2 || true)
    [ -n "$s" ] || nothing_measured "$1 train ${3:-(default case)} logged no epoch after the first (see $log)"
    echo "$s"
}
for ((r = 1; r <= ROUNDS; r++)); do
    for i in "${!CASES[@]}"; do
        run "$A" "$i" "${CASES[$i]}" >>"$TMP/a$i"
        run "$B" "$i" "${CASES[$i]}" >>"$TMP/b$i"
    done
done
stats() { sort -g "$1" | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f", m, v[1], v[NR]}'; }
echo "| case | A s/epoch, median (min-max) | B s/epoch, median (min-max) | B/A |"
echo "|---|---|---|---|"
for i in "${!CASES[@]}"; do
    read -r am alo ahi <<<"$(stats "$TMP/a$i")"
    read -r bm blo bhi <<<"$(stats "$TMP/b$i")"
    printf "| %s | %s (%s-%s) | %s (%s-%s) | %.3f |\n" "${CASES[$i]:-default}" "$am" "$alo" "$ahi" "$bm" "$blo" "$bhi" \
        "$(awk -v a="$am" -v b="$bm" 'BEGIN {print b / a}')"
done
echo
echo "A: $A; B: $B; $ROUNDS rounds x $((EPOCHS - 1)) epochs each, interleaved; $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%d)"
