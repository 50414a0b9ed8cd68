#!/usr/bin/env bash
# ctest scripts_args: the example scripts (examples/**/*.sh, *.py, tests/reports_smoke.sh) held to
# dptrain's standard. A bad argument (a missing value, an unknown flag, a bad number or choice) is
# one line on stderr naming it, exit 2, before anything runs: no "unbound variable", no bash
# division by zero, no Python traceback. And on a machine with no GPU, examples/gpu/check.sh and
# examples/bench/gpu_vs_pytorch.sh exit non-zero saying nothing was measured (check.sh's CUDA
# suites skipping is "skipped", not "pass"). Quick (seconds): nothing is built or trained.
# Environment: DPTRAIN (a dptrain of any build; a stand-in that fails like a CPU build without it).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=${DP_TEST_TMP:-/tmp}/scripts_args.$$
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
# the interpreter itself, not a version manager's shim in front of it (each start counts here)
PY=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)') || { echo "scripts_args: no python3" >&2; exit 1; }
fail() { printf 'scripts_args: FAIL: %s\n' "$(tr '\n' ' ' <<<"$*")" | tee -a "$TMP/fails" >&2; }

# usage WORD CMD...: CMD exits 2 with one stderr line that holds WORD, and nothing that says it broke.
# Runs in the background, four at a time (the cases are independent; each is mostly a start-up).
N=0
usage() {
    N=$((N + 1))
    while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n; done
    usage_one "$N" "$@" &
}
usage_one() {
    local n=$1 word=$2 rc=0
    shift 2
    local out=$TMP/usage$n.out err=$TMP/usage$n.err
    # nothing may run: the argument is refused before any prerequisite is looked at
    env DPTRAIN=/nonexistent/dptrain BASE=/nonexistent/dptrain timeout 30 "$@" > "$out" 2> "$err" < /dev/null || rc=$?
    local what="${*#"$ROOT/"}"
    if [ $rc != 2 ]; then
        fail "$what: exit $rc, not 2: $(head -c 300 "$err")"
    elif [ "$(wc -l < "$err")" != 1 ]; then
        fail "$what: $(wc -l < "$err") lines on stderr, not 1: $(head -c 300 "$err")"
    elif ! grep -qF -e "$word" "$err"; then
        fail "$what: the message does not name '$word': $(cat "$err")"
    fi
    if grep -qiE 'unbound variable|Traceback|division|integer expression|command not found' "$out" "$err"; then
        fail "$what: $(grep -hiE 'unbound variable|Traceback|division|integer expression|command not found' "$out" "$err" | head -1)"
    fi
}
E=$ROOT/examples

# ---- every shell script: a missing value (last on the line) of the flag named, and an unknown flag
for row in bench/ab_builds.sh:--rounds bench/accuracy_vs_pytorch.sh:--epochs bench/bitwise_replicas.sh:--epochs \
           bench/cpu_speed.sh:--rounds bench/cpu_shapes.sh:--rounds bench/determinism_cost.sh:--rounds \
           bench/epoch_time.sh:--rounds bench/gpu_vs_pytorch.sh:--rounds bench/mpi_vs_sim.sh:--ns \
           bench/predict_vs_measured.sh:--ns bench/sim_overhead.sh:--replicas bench/framework_costs.sh:--python \
           gpu/check.sh:--rounds gpu/multigpu.sh:--steps gpu/record_profiles.sh:--build gpu/transfer_check.sh:--build \
           gpu/nccl_memory.sh:--build reports/plots.sh:--out reports/framework_check.sh:--framework \
           $(cd "$E" && printf '%s:--out ' reports/0*.sh); do
    usage "${row#*:}" "$E/${row%%:*}" "${row#*:}"
    usage --bogus "$E/${row%%:*}" --bogus
done
usage --bogus "$ROOT/tests/reports_smoke.sh" --bogus
# ---- and a bad number, choice or path
usage --rounds "$E/bench/ab_builds.sh" --rounds 0
usage --epochs "$E/bench/ab_builds.sh" --epochs x
usage --seeds "$E/bench/accuracy_vs_pytorch.sh" --seeds "1 x"
usage --threads "$E/bench/bitwise_replicas.sh" --threads 0
usage --rounds "$E/bench/cpu_speed.sh" --rounds 0
usage --sections "$E/bench/cpu_speed.sh" --sections foo
usage --epochs "$E/bench/cpu_shapes.sh" --epochs 1
usage --cores "$E/bench/cpu_shapes.sh" --cores x
usage --torch-threads "$E/bench/cpu_shapes.sh" --torch-threads 0
usage --rounds "$E/bench/determinism_cost.sh" --rounds x
usage --epochs "$E/bench/epoch_time.sh" --epochs 1
usage --rounds "$E/bench/gpu_vs_pytorch.sh" --rounds 0
usage bogus "$E/bench/gpu_vs_pytorch.sh" --cases lenet,bogus
usage --cases "$E/bench/gpu_vs_pytorch.sh" --cases --out "$TMP/x"
usage --ns "$E/bench/mpi_vs_sim.sh" --ns "1 0"
usage --epochs "$E/bench/mpi_vs_sim.sh" --epochs x
usage --ns "$E/bench/predict_vs_measured.sh" --ns 0
usage --topology "$E/bench/predict_vs_measured.sh" --topology "$TMP/none"
usage --replicas "$E/bench/sim_overhead.sh" --replicas 0
usage --reps "$E/bench/framework_costs.sh" --reps 0
usage --rounds "$E/gpu/check.sh" --rounds 0
usage bogus "$E/gpu/check.sh" --phases env,bogus
usage --gpus "$E/gpu/multigpu.sh" --gpus 1
usage --device-name "$E/gpu/record_profiles.sh" --device-name ../x
usage --out "$E/gpu/record_profiles.sh" --out
usage --out "$E/gpu/transfer_check.sh" --out ""
usage --epochs "$E/gpu/nccl_memory.sh" --epochs 0
for r in "$E"/reports/0*.sh; do usage --data "$r" --data "$TMP/none"; done
usage 999 "$ROOT/tests/reports_smoke.sh" 999
usage --data "$E/reports/plots.sh" --data "$TMP/none"
usage --out "$E/reports/framework_check.sh" --out ""

# ---- every Python program: argparse's types and checks, one line, before torch or numpy is loaded
usage --reps "$PY" "$E/bench/framework_costs.py" --reps x
usage --device "$PY" "$E/bench/framework_costs.py" --device tpu
usage --bogus "$PY" "$E/bench/framework_costs.py" --bogus
usage --epochs "$PY" "$E/bench/jsonl_stats.py" complete "$TMP/log" --epochs
usage --bogus "$PY" "$E/bench/jsonl_stats.py" complete "$TMP/log" --epochs 1 --bogus
usage --epochs "$PY" "$E/bench/jsonl_stats.py" complete "$TMP/log" --epochs 0
usage --plot "$PY" "$E/bench/plot_epoch_times.py" --plot
usage --bogus "$PY" "$E/bench/plot_epoch_times.py" --bogus
usage --out-dir "$PY" "$E/bench/plot_epoch_times.py" --out-dir "$TMP/none"
usage --plot "$PY" "$E/bench/plot_predict_vs_measured.py" "$TMP" --plot
usage --bogus "$PY" "$E/bench/plot_predict_vs_measured.py" "$TMP" --bogus
usage "$TMP/none" "$PY" "$E/bench/plot_predict_vs_measured.py" "$TMP/none"
usage --machine "$PY" "$E/gpu/gpu_tables.py" bench "$ROOT/tests/CMakeLists.txt" --machine
usage --bogus "$PY" "$E/gpu/gpu_tables.py" bench "$ROOT/tests/CMakeLists.txt" --bogus
usage "$TMP/none" "$PY" "$E/gpu/gpu_tables.py" bench "$TMP/none"
usage --epochs "$PY" "$E/jax/lenet_reference.py" --epochs
usage --bogus "$PY" "$E/jax/lenet_reference.py" --bogus
usage --epochs "$PY" "$E/jax/lenet_reference.py" --epochs 0
usage --epochs "$PY" "$E/pytorch/cpu_reference.py" lenet --epochs
usage --bogus "$PY" "$E/pytorch/cpu_reference.py" lenet --bogus
usage --shape "$PY" "$E/pytorch/cpu_reference.py" resnet18 --shape 3x0x1
usage --epochs "$PY" "$E/pytorch/gpu_reference.py" --epochs
usage --bogus "$PY" "$E/pytorch/gpu_reference.py" --bogus
usage --cases "$PY" "$E/pytorch/gpu_reference.py" --cases bogus
usage --batch "$PY" "$E/pytorch/interop.py" eval --batch
usage --bogus "$PY" "$E/pytorch/interop.py" eval --bogus
usage --lr "$PY" "$E/pytorch/interop.py" eval --lr 0
usage --epochs "$PY" "$E/pytorch/lenet_reference.py" --epochs
usage --bogus "$PY" "$E/pytorch/lenet_reference.py" --bogus
usage --momentum "$PY" "$E/pytorch/lenet_reference.py" --momentum 1
usage threads "$PY" "$E/pytorch/plain_loop.py" x
usage --bogus "$PY" "$E/pytorch/plain_loop.py" --bogus
usage "$TMP/none" "$PY" "$E/pytorch/plain_loop.py" 2 3 "$TMP/none"
usage --rounds "$PY" "$E/reports/derive_profiles.py" checks --rounds
usage --bogus "$PY" "$E/reports/derive_profiles.py" checks --bogus
usage --rounds "$PY" "$E/reports/derive_profiles.py" checks --rounds 0
usage --bogus "$PY" "$E/reports/derive_profiles.py" cpu-spec --bogus
usage --measured "$PY" "$E/reports/derive_profiles.py" check --source x --from h100 --to h200 --measured "$TMP/none"
usage "spec nonesuch" "$PY" "$E/reports/derive_profiles.py" check --source "$ROOT/sim/presets/h100-lenet.profile" \
    --from nonesuch --to h200 --measured "$ROOT/sim/presets/h100-lenet.profile"
usage --report "$PY" "$E/reports/reports.py" --out "$TMP/r" --report
usage --bogus "$PY" "$E/reports/reports.py" --report 000 --out "$TMP/r" --bogus
usage --report "$PY" "$E/reports/reports.py" --report 999 --out "$TMP/r"
wait

# ---- --help from the script's own directory by a relative path (it used to read "./check.sh" after a cd)
while IFS= read -r script; do
    rc=0
    (cd "$(dirname "$script")" && timeout 30 "./$(basename "$script")" --help) > "$TMP/help.out" 2> "$TMP/help.err" \
        < /dev/null || rc=$?
    if [ $rc != 0 ] || [ ! -s "$TMP/help.out" ] || [ -s "$TMP/help.err" ]; then
        fail "cd $(dirname "${script#"$ROOT/"}") && ./$(basename "$script") --help: exit $rc: $(head -c 300 "$TMP/help.err")"
    fi
done < <(find "$E" -name '*.sh' -perm -u+x ! -path '*/lib/*' | sort)

# ---- no GPU: nothing was measured, exit non-zero
# measured NAME CMD...: CMD exits non-zero, its stderr saying nothing was measured
measured() {
    local name=$1 rc=0
    shift
    timeout 60 "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" < /dev/null || rc=$?
    if [ $rc = 0 ]; then
        fail "$name: exit 0 on a machine with no GPU"
    elif ! grep -q 'nothing was measured' "$TMP/$name.err"; then
        fail "$name: exit $rc without saying nothing was measured: $(tail -3 "$TMP/$name.err")"
    fi
    if grep -qiE 'unbound variable|Traceback|division' "$TMP/$name.out" "$TMP/$name.err"; then
        fail "$name: $(grep -hiE 'unbound variable|Traceback|division' "$TMP/$name.out" "$TMP/$name.err" | head -1)"
    fi
}
# stand-ins: an nvidia-smi that finds no driver, one that lists a GPU, and a build whose CUDA
# suite skips (no device) and whose dptrain cannot reach one
mkdir -p "$TMP/nogpu" "$TMP/gpu" "$TMP/build"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."\nexit 9\n' > "$TMP/nogpu/nvidia-smi"
printf '#!/bin/sh\ncase "$1" in -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;; *) echo "Stand-in GPU, 0" ;; esac\n' > "$TMP/gpu/nvidia-smi"
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "dptrain stand-in"; exit 0; }\necho "dptrain: --device cuda: no CUDA device is visible" >&2\nexit 1\n' > "$TMP/build/dptrain"
chmod +x "$TMP/nogpu/nvidia-smi" "$TMP/gpu/nvidia-smi" "$TMP/build/dptrain"
cat > "$TMP/build/CTestTestfile.cmake" <<'EOF'
add_test(test_cuda_standin "sh" "-c" "echo no CUDA device; exit 77")
set_tests_properties(test_cuda_standin PROPERTIES LABELS "cuda" SKIP_RETURN_CODE 77)
EOF
D=${DPTRAIN:-$TMP/build/dptrain}
export CUDA_VISIBLE_DEVICES=   # a real dptrain or PyTorch on a GPU machine sees none either

# check.sh where nvidia-smi finds no GPU: stops before building anything
PATH="$TMP/nogpu:$PATH" measured check-nogpu "$E/gpu/check.sh" --out "$TMP/check1" --build "$TMP/build"
# check.sh where a GPU is listed but the suites skip and every bench case fails: skipped, not pass
PATH="$TMP/gpu:$PATH" measured check-skipped "$E/gpu/check.sh" --quick --phases tests,bench --out "$TMP/check2" \
    --build "$TMP/build"
if ! grep -q '"check":"ctest-cuda","status":"skipped"' "$TMP/check2/results.jsonl" 2>/dev/null; then
    fail "check.sh: the CUDA suite, all skipped, is not reported 'skipped': $(grep ctest-cuda "$TMP/check2/results.jsonl" 2>&1)"
fi
if ! grep -q '"check":"bench","status":"FAIL' "$TMP/check2/results.jsonl" 2>/dev/null; then
    fail "check.sh: a bench whose every case failed is not a FAIL: $(grep '"bench"' "$TMP/check2/results.jsonl" 2>&1)"
fi
# transfer_check.sh where nvidia-smi finds no GPU, and where it names one without a spec
PATH="$TMP/nogpu:$PATH" measured transfer-nogpu "$E/gpu/transfer_check.sh" --out "$TMP/tr1" --build "$TMP/build"
PATH="$TMP/gpu:$PATH" measured transfer-nospec "$E/gpu/transfer_check.sh" --out "$TMP/tr2" --build "$TMP/build"
# the multigpu phase where one GPU is listed: check.sh says it skipped it (a results line, exit 0);
# multigpu.sh alone measured nothing
if ! PATH="$TMP/gpu:$PATH" timeout 60 "$E/gpu/check.sh" --phases multigpu --out "$TMP/check3" --build "$TMP/build" \
        > "$TMP/check3.out" 2>&1; then
    fail "check.sh --phases multigpu with one GPU: exit non-zero: $(tail -3 "$TMP/check3.out")"
fi
grep -q '"check":"multigpu","status":"skipped".*lists 1 GPU' "$TMP/check3/results.jsonl" 2>/dev/null ||
    fail "check.sh --phases multigpu with one GPU: no skipped line: $(cat "$TMP/check3/results.jsonl" 2>&1)"
grep -q 'multigpu: skipped: nvidia-smi -L lists 1 GPU' "$TMP/check3.out" ||
    fail "check.sh --phases multigpu with one GPU: no line saying it skipped: $(cat "$TMP/check3.out")"
PATH="$TMP/gpu:$PATH" measured multigpu-one "$E/gpu/multigpu.sh" --out "$TMP/mg1" --build "$TMP/build"
# multigpu.sh --dry-run at 4 GPUs: every launcher at 2, 3 and 4 ranks against the sim, --gpus, the
# transports, resume at another size, the kill, the timings and the prediction
"$E/gpu/multigpu.sh" --dry-run --gpus 4 --out "$TMP/mg4" --build "$TMP/build" > "$TMP/mg4.out" 2>&1 ||
    fail "multigpu.sh --dry-run: exit non-zero: $(tail -3 "$TMP/mg4.out")"
for want in 'ctest --test-dir' '--replicas 3' '--replicas 4' 'torchrun --nproc-per-node 4' 'mpirun --oversubscribe --bind-to none -np 3' \
        'RANK=r WORLD_SIZE=4' '--gpus 0,1,2,3' '--gpus 0,1 ' '--mode dp' '--sync-bn' '--accumulate 2' \
        'NCCL_P2P_DISABLE=1' 'NCCL_SHM_DISABLE=1' '[compare]' '--resume' 'kill -9 of rank 1' '--no-graph' \
        'predict --model lenet'; do
    grep -qF -e "$want" "$TMP/mg4.out" || fail "multigpu.sh --dry-run --gpus 4 does not run '$want'"
done

# gpu_vs_pytorch.sh with the test's dptrain and no GPU, with and without the PyTorch peer
DPTRAIN=$D measured gpu-vs-pytorch "$E/bench/gpu_vs_pytorch.sh" --rounds 1 --cases lenet-bn --out "$TMP/gvp1"
DPTRAIN=$D measured gpu-vs-pytorch-nopeer "$E/bench/gpu_vs_pytorch.sh" --rounds 1 --cases lenet --skip-pytorch \
    --out "$TMP/gvp2"
[ ! -s "$TMP/gvp2/gpu_vs_pytorch.md" ] || fail "gpu_vs_pytorch.sh left a table of nothing: $TMP/gvp2/gpu_vs_pytorch.md"
# cpu_speed.sh where every dptrain run fails: nothing was measured, exit 1 (the markdown still written)
DPTRAIN=/bin/false measured cpu-speed-failing "$E/bench/cpu_speed.sh" --sections threads --threads-rounds 1 \
    --peers none --wait-idle 0 --out "$TMP/cs"
# cpu_shapes.sh where dptrain fails: nothing was measured, exit 1, docs/results.md left alone
DPTRAIN=/bin/false measured cpu-shapes-failing "$E/bench/cpu_shapes.sh" --rounds 1 --epochs 2 --skip-pytorch \
    --results none --out "$TMP/shapes"

wait
if [ -s "$TMP/fails" ]; then
    echo "scripts_args: $(wc -l < "$TMP/fails") failure(s) (of $N argument cases and the no-GPU runs)" >&2
    exit 1
fi
echo "scripts_args: all ok"
