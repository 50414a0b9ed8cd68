#!/usr/bin/env bash
# ctest reports_smoke_000 .. _004: a report script (examples/reports/) in its --smoke size (a few
# steps per run), so that it cannot rot: exit code, the table's columns, the report's own figures
# beside dptrain's, the readings the table decides (bits compared on checkpoint tensors, loader-bound
# or not), and the plot. Skips (77) without a python3 that has matplotlib. MPI runs are left out
# (MPIRUN=): the sanitized builds run this too. Argument: the report's number (000 .. 004); without
# one, all five. (The scripts' answers to bad arguments are checked by tests/scripts_args.sh.)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ONLY=""
if [ $# -gt 1 ] || { [ $# = 1 ] && ! [[ "$1" =~ ^00[0-4]$ ]]; }; then
    echo "reports_smoke.sh: $1: unknown argument; it takes a report's number, 000 to 004, or none (environment: DPTRAIN, DP_TEST_TMP, PYTHON)" >&2
    exit 2
fi
[ $# = 1 ] && ONLY=$1
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
    local rows="$out/rows.md"   # the main table's data rows (the effects table says what it found in words)
    sed '/^What no report could do/q' "$t" | grep '^| ' | grep -v '^| setup' > "$rows" || true
    [ -s "$rows" ] || fail "$script: the table has no rows"
    if grep -vq '[0-9] \(s\|ms\|%\)' "$rows"; then
        fail "$script: a row without a figure: $(grep -v '[0-9] \(s\|ms\|%\)' "$rows" | head -1)"
    fi
    [ "$(head -c 8 "$out/plot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$script: plot.png is not a PNG"
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out/results.json" || fail "$script: results.json"
    echo "reports_smoke: $script ok"
}
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
not_in() {  # not_in ID TEXT: the table of report ID must not say TEXT
    if grep -qF -e "$2" "$TMP/$1/table.md"; then fail "$1: the table says '$2'"; fi
}
if want 000; then
    # the report's DDP run without --sync-bn; --sync-bn's bits decided on the checkpoints' tensors
    check 000_lenet_bn_cifar10.sh "3.29 s/epoch" "25.3 s/epoch" "1.80 s/epoch" "65.39 %" "--sync-bn" \
        "| DDP 4, global 256, lr 0.001" "checkpoint against one device's: the same bits (every checkpoint tensor)"
    not_in 000 "DDP 4 --sync-bn, global 256"
fi
if want 001; then
    # the simulated DP as 4 replicas sharing one T4; the report's own contradiction shown
    check 001_lenet_cifar10_t4.sh "19.24 ms/batch" "34.80 ms/batch" "8.70 ms/batch" "228.18 s" \
        "4 replicas taking turns on one T4" "= 6,013 s" "Assumed (not in the report): the model: dptrain's LeNet"
    not_in 001 "DataParallel on 1 device = 1 device"
fi
if want 002; then
    check 002_mnist_ddp_3090.sh "200.97 s, 99.56 %" "117.07 s, 99.43 %" "170.21 s, 99.46 %" "228.03 s, 99.37 %" \
        "331.55 s, 99.55 %" "128.20 s, 99.49 %" "126.65 s, 99.34 %" "speed-up column 2.86; its times give 0.88" \
        "Assumed (not in the report): the model"
fi
if want 003; then
    # "same bits" from the tensors (design.md: DDP 8 = one replica, DP 8 = DP on one replica); 4 workers
    # not loader-bound by the report's own 0.5 ms load and 1.2 ms update
    check 003_mnist_h100_loader.sh "72.80 s" "18.47 s" "160.88 s" "DDP 8 against one replica: the same bits" \
        "DP 8 against DP on one replica (--mode dp --replicas 1): the same bits" \
        "(load 0.5 ms, update 1.2 ms an iteration) not loader-bound" "= 31.9 s, not 18.47 s"
    not_in 003 "loader-bound: the report timed its loader"
fi
if want 004; then
    # DDP at 256 per process as the blog's code; no hardware the blog does not name
    check 004_resnet18_dp_vs_ddp.sh "DDP, 4 GPUs, batch 1024 in all (256 per process)" \
        "DataParallel, 8 GPUs, batch 256 in all (32 per GPU)" "the blog names no GPU"
    not_in 004 "RTX 4090"
fi
echo "reports_smoke: ${ONLY:-all} ok"
