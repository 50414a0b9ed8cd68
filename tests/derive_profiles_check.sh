#!/usr/bin/env bash
# ctest derive_profiles_check: the transfer check tests the formula that makes the shipped profiles.
# 1. `derive_profiles.py shipped` writes every derived profile in sim/presets/ again, byte for byte
#    (the files are what the script makes, with the sources its SHIPPED table names).
# 2. `derive_profiles.py check`, given each shipped profile as the "measured" one and the sources
#    and specs `shipped` used, reports 0 error on every row and node: the check derives exactly as
#    `shipped` does, so a check against a real measurement (examples/gpu/transfer_check.sh) tests
#    the shipped profiles' formula, not another.
# 3. A CPU profile carried to a GPU is refused (exit 2, one line): no shipped profile is made so.
# 4. This machine's CPU spec is measured, not shipped: `cpu-spec` writes one naming this CPU (as
#    /proc/cpuinfo does), keeps it while it names this CPU, and measures again when it names another.
# Environment: DPTRAIN (the build's dptrain: the skeletons of `shipped`), BENCH_CPU_SPEC (the build's
# bench_cpu_spec: 4 s).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=${DP_TEST_TMP:-/tmp}/derive_profiles_check.$$
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
PY=${PYTHON:-python3}
S=$ROOT/examples/reports/derive_profiles.py
P=$ROOT/sim/presets
FAILS=0
fail() { echo "derive_profiles_check: FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

# 1
if ! "$PY" "$S" shipped --dptrain "${DPTRAIN:-$ROOT/build/dptrain}" --out "$TMP/shipped" > "$TMP/shipped.log" 2>&1; then
    fail "shipped: $(tail -3 "$TMP/shipped.log")"
fi
# the SHIPPED table: "target model sources" per line
entries=$(cd "$ROOT/examples/reports" && "$PY" -c '
import derive_profiles as d
for tgt, model, shape, srcs in d.SHIPPED:
    print(tgt, model, ",".join(srcs))') || { fail "cannot read derive_profiles.SHIPPED"; exit 1; }
[ "$(wc -l <<<"$entries")" -ge 5 ] || fail "SHIPPED names $(wc -l <<<"$entries") profiles, not 5 or more"
while read -r tgt model srcs; do
    f=$tgt-$model.profile
    [ -f "$P/$f" ] || { fail "$f: in SHIPPED, not in sim/presets"; continue; }
    cmp -s "$TMP/shipped/$f" "$P/$f" || fail "$f: sim/presets's differs from what derive_profiles.py shipped writes: $(diff "$TMP/shipped/$f" "$P/$f" 2>&1 | head -4 | tr '\n' ' ')"
    # 2
    src=$(sed "s#\([^,]*\)#$P/\1.profile#g" <<<"$srcs")
    if ! "$PY" "$S" check --source "$src" --from h100 --to "$tgt" --measured "$P/$f" --json "$TMP/$f.json" \
        > "$TMP/$f.log" 2>&1; then
        fail "check $f: $(tail -3 "$TMP/$f.log")"
        continue
    fi
    "$PY" - "$TMP/$f.json" "$f" <<'PY' || fail "check $f: the derived numbers are not the shipped file's (above)"
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
assert r["rows"], "no rows"
for row in r["rows"]:
    pairs = [("step", row["measured_s"], row["derived_s"])] + [(n["name"], n["measured_s"], n["derived_s"]) for n in row["nodes"]]
    for what, m, d in pairs:
        # the file holds 7 significant digits
        if abs(d - m) > 1e-6 * abs(m) + 1e-12:
            bad.append(f"batch {row['batch']} {what}: shipped {m:.6e}, check derived {d:.6e}")
for b in bad[:5]:
    print(f"derive_profiles_check: {sys.argv[2]}: {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY
done <<<"$entries"

# 3
rc=0
cat > "$TMP/cpu.spec" <<'SPEC'
device test-cpu
kind cpu
fp32_tflops 0.1
mem_bandwidth_GBps 10
launch_us 0
SPEC
"$PY" "$S" check --source "$P/h100-lenet.profile" --from "$TMP/cpu.spec" --to h100 --measured "$P/h100-lenet.profile" \
    > "$TMP/cross.out" 2> "$TMP/cross.err" || rc=$?
if [ $rc != 2 ] || [ "$(wc -l < "$TMP/cross.err")" != 1 ] || ! grep -q -- "--from cpu is a cpu" "$TMP/cross.err"; then
    fail "a CPU spec to a GPU's: exit $rc, not refused in one line: $(head -c 300 "$TMP/cross.err")"
fi

# 4
B=${BENCH_CPU_SPEC:-$ROOT/build/bench_cpu_spec}
spec=$TMP/here/cpu-here.spec
here=$(cd "$ROOT/examples/reports" && "$PY" -c 'import derive_profiles as d; print(d.cpu_id())')
key() { sed -n "s/^$1 \([^ ]*\).*/\1/p" "$spec"; }
if ! "$PY" "$S" cpu-spec --bench "$B" --out "$spec" > "$TMP/spec1.log" 2>&1; then
    fail "cpu-spec: $(tail -3 "$TMP/spec1.log")"
else
    [ "$(key cpu)" = "$here" ] || fail "cpu-spec: the spec names '$(key cpu)', this CPU is '$here'"
    [ "$(key kind)" = cpu ] || fail "cpu-spec: kind '$(key kind)', not cpu"
    "$PY" -c 'import sys; v = [float(x) for x in sys.argv[1:]]; sys.exit(0 if len(v) == 2 and all(x > 0 for x in v) else 1)' \
        "$(key fp32_tflops)" "$(key mem_bandwidth_GBps)" || fail "cpu-spec: figures '$(key fp32_tflops)' '$(key mem_bandwidth_GBps)'"
    before=$(stat -c %y "$spec")
    "$PY" "$S" cpu-spec --bench "$B" --out "$spec" > /dev/null 2>&1
    [ "$(stat -c %y "$spec")" = "$before" ] || fail "cpu-spec: measured again though the spec names this CPU"
    sed -i 's#^cpu .*#cpu GenuineIntel/6/85/Intel(R)-Xeon(R)-CPU#' "$spec"
    "$PY" "$S" cpu-spec --bench "$B" --out "$spec" > /dev/null 2>&1
    [ "$(key cpu)" = "$here" ] || fail "cpu-spec: a spec of another CPU ('$(key cpu)') was kept on '$here'"
fi

[ $FAILS = 0 ] || { echo "derive_profiles_check: $FAILS failure(s)" >&2; exit 1; }
echo "derive_profiles_check: all ok"
