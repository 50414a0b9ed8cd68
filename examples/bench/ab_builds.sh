#!/usr/bin/env bash
# Two dptrain builds against each other on the same cases, interleaved (round 1: A then B on every
# case, round 2: the same, ...), so that a slow phase of the machine hits both: LeNet / Fashion-MNIST
# epochs at batch 64, epoch 1 of every run dropped, the median seconds per epoch of the rest with
# min-max, and the ratio B/A of the medians, as markdown. See --help.
set -euo pipefail

PROG=$(basename "$0")
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
        --a) A=$2; shift 2 ;;
        --b) B=$2; shift 2 ;;
        --case) CASES+=("$2"); shift 2 ;;
        -r|--rounds) ROUNDS=$2; shift 2 ;;
        -e|--epochs) EPOCHS=$2; shift 2 ;;
        -t|--threads) THREADS=$2; shift 2 ;;
        *) echo "$PROG: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
[ -x "$A" ] && [ -x "$B" ] || { echo "$PROG: --a and --b must name dptrain binaries" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ && "$EPOCHS" =~ ^[2-9]$|^[1-9][0-9]+$ ]] || { echo "$PROG: --rounds >= 1, --epochs >= 2" >&2; exit 2; }
[ ${#CASES[@]} -gt 0 ] || CASES=("" "--replicas 4" "--mode dp --replicas 2")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# seconds of epochs 2.. of one run, one per line
run() {  # bin case_index flags
    local log="$TMP/run.jsonl"
    # shellcheck disable=SC2086
    "$1" train --epochs "$EPOCHS" --threads "$THREADS" --quiet --log "$log" $3 >"$TMP/out" 2>&1 ||
        { echo "$PROG: $1 failed:" >&2; cat "$TMP/out" >&2; exit 1; }
    grep '"event":"epoch"' "$log" | tail -n +2 | grep -o '"seconds":[0-9.e-]*' | cut -d: -f2
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
