#!/usr/bin/env bash
# ctest reports_smoke: the report scripts (examples/reports/) in their --smoke size (a few steps per
# run), so that they cannot rot: exit codes, the tables' columns, the reports' own figures beside
# dptrain's, and the plots. Skips (77) without a python3 that has matplotlib. MPI runs are left out
# (MPIRUN=): the sanitized builds run this too. Takes no arguments. (The scripts' answers to bad
# arguments are checked by tests/scripts_args.sh, which needs no matplotlib.)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -gt 0 ]; then
    echo "reports_smoke.sh: $1: unknown argument; it takes none (environment: DPTRAIN, DP_TEST_TMP, PYTHON)" >&2
    exit 2
fi
TMP=${DP_TEST_TMP:-/tmp}/reports_smoke.$$
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
export MPIRUN=
have_mpl=0
for py in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$py" > /dev/null 2>&1 && "$py" -c 'import matplotlib' > /dev/null 2>&1; then have_mpl=1; break; fi
done
if [ "$have_mpl" = 0 ]; then
    echo "reports_smoke: SKIP: no python3 with matplotlib (apt-get install -y python3-matplotlib)"
    exit 77
fi
fail() { echo "reports_smoke: FAIL: $*" >&2; exit 1; }

# a bad flag: one line naming it, exit 2
rc=0
"$ROOT/examples/reports/001_lenet_cifar10_t4.sh" --no-such-flag > "$TMP/usage.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "a bad flag exited $rc, not 2"
if [ "$(wc -l < "$TMP/usage.txt")" != 1 ] || ! grep -q -e '--no-such-flag' "$TMP/usage.txt"; then
    fail "a bad flag: not one line naming it: $(cat "$TMP/usage.txt")"
fi

check() {  # check SCRIPT FIGURE...: runs it in --smoke size and looks for the figures in its table
    local script=$1 out="$TMP/${1:0:3}"
    shift
    "$ROOT/examples/reports/$script" --smoke --out "$out" > "$out.log" 2>&1 || { cat "$out.log" >&2; fail "$script --smoke failed"; }
    local t="$out/table.md"
    [ -s "$t" ] || fail "$script wrote no table"
    for col in "the report" "dptrain measured here" "dptrain predicted on the report's hardware" "breakdown" \
               "What no report could do"; do
        grep -qF -e "$col" "$t" || fail "$script: the table has no '$col'"
    done
    for fig in "$@"; do
        grep -qF -e "$fig" "$t" || fail "$script: the table lacks the report's figure '$fig'"
    done
    # every data row has a measured or predicted figure (a number with a unit)
    if grep '^| ' "$t" | grep -v '^| setup\|^| effect' | grep -vq '[0-9] \(s\|ms\|%\)'; then
        fail "$script: a row without a figure: $(grep '^| ' "$t" | grep -v '[0-9] \(s\|ms\|%\)' | head -1)"
    fi
    [ "$(head -c 8 "$out/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$script: plot.png is not a PNG"
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out/results.json" || fail "$script: results.json"
    echo "reports_smoke: $script ok"
}
check 000_lenet_bn_cifar10.sh "3.29 s/epoch" "25.3 s/epoch" "1.80 s/epoch" "65.39 %" "--sync-bn"
check 001_lenet_cifar10_t4.sh "19.24 ms/batch" "34.80 ms/batch" "8.70 ms/batch" "228.18 s"
echo "reports_smoke: all ok"
