#!/usr/bin/env bash
# check.sh: everything a lent GPU machine must check, in one command, from a fresh copy of the tree.
# Carries its own libraries and data (.carry/, see device_env.sh), builds with all cores, runs the
# CUDA and NCCL suites, the CUDA suites under compute-sanitizer, the benchmarks against PyTorch in
# the same run, the accuracy over 3 seeds, the overhead model's GPU compute profiles, the roofline
# transfer from the H100's profiles to this GPU's (transfer_check.sh: on an H200, H100 -> H200), and
# the many-core CPU checks (the whole CPU suite, MPI N x T shapes, processes x threads against
# PyTorch); the tests phase also prints NCCL's device memory measured at one rank
# (examples/gpu/nccl_memory.sh). Each check appends one line to a
# results file; `examples/gpu/gpu_tables.py doc FILE` makes docs/gpu.md's tables from it.
#
#   examples/gpu/check.sh [--quick] [--rounds R]
#                         [--phases env,build,tests,sanitize,bench,accuracy,profiles,transfer,multigpu,cpu]
#                         [--out DIR] [--build DIR]
#
# --quick: one bench round (--rounds: another count) and only the kernel suite under the sanitizers
# (under 8 minutes);
# the whole run is under 25 minutes on an H100 with 16 cores. Phases run in the order above;
# a later call with --phases continues an earlier one's results file in the same --out
# (the build is kept in build-gpu/, or --build DIR). A check whose tests were all skipped is
# "skipped", not "pass". Exit status: 0 when every check passed or was skipped and a GPU check
# measured something; 1 when a check failed or nothing was measured on a GPU (none is visible:
# stops before building; or every GPU check was skipped); 2 for a bad argument. The multigpu phase
# (examples/gpu/multigpu.sh: NCCL on several GPUs against the sim) runs where nvidia-smi -L lists 2
# or more GPUs, and is a skipped check, saying so, elsewhere.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CALLER=$PWD
cd "$ROOT" || exit 1
me=$(basename "$0") PROG=$(basename "$0")
. "$ROOT/examples/lib/args.sh"
QUICK=0 ROUNDS= PHASES=env,build,tests,sanitize,bench,accuracy,profiles,transfer,multigpu,cpu OUTDIR=$ROOT/out/gpu-check
BUILD=$ROOT/build-gpu
JOBS=$(nproc)
ARGS="$*"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --rounds) need_value "$@"; ROUNDS=$2; shift ;;
        --phases) need_value "$@"; PHASES=$2; shift ;;
        --out) need_value "$@"; OUTDIR=$2; shift ;;
        --build) need_value "$@"; BUILD=$2; shift ;;
        -h|--help) sed -n 2,25p "$ROOT/examples/gpu/check.sh"; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
    shift
done
[ -z "$ROUNDS" ] || need_uint --rounds "$ROUNDS" 1
need_choices --phases "$PHASES" env build tests sanitize bench accuracy profiles transfer multigpu cpu
need_nonempty --out "$OUTDIR"
need_nonempty --build "$BUILD"
# relative paths are the caller's
[[ $OUTDIR == /* ]] || OUTDIR=$CALLER/$OUTDIR
[[ $BUILD == /* ]] || BUILD=$CALLER/$BUILD
has() { [[ ",$PHASES," == *",$1,"* ]]; }
# the phases that measure on a GPU: without one visible, nothing they would report means anything,
# so stop before the build (a CUDA build needs no GPU, and its tests all skip without one)
GPU_PHASES=
for p in tests sanitize bench accuracy profiles transfer; do
    if has $p && { [ $p != accuracy ] || [ $QUICK = 0 ]; }; then GPU_PHASES+=${GPU_PHASES:+,}$p; fi
done
if [ -n "$GPU_PHASES" ]; then
    if ! command -v nvidia-smi > /dev/null 2>&1; then
        nothing_measured "no GPU visible (no nvidia-smi on PATH); the phases $GPU_PHASES need one"
    fi
    if ! smi=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$smi"; then
        nothing_measured "no GPU visible (nvidia-smi -L: $(head -1 <<<"$smi" | cut -c1-120)); the phases $GPU_PHASES need one"
    fi
fi
mkdir -p "$OUTDIR/logs" || exit 1
RES=$OUTDIR/results.jsonl
D=$BUILD/dptrain
FAILED=0 GPU_PASSED=0
. "$ROOT/examples/gpu/device_env.sh"
DATA=${DP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
# no_test_passed LOG: a ctest run in which no test passed (none found, or every one skipped: no device)
no_test_passed() { ! grep -qE 'Test +#[0-9]+: .* Passed' "$1"; }
# check NAME COMMAND...: runs it with its output in logs/NAME.log, for at most $TMO seconds
# (default 900); one results line (77, or a test suite whose tests all skipped = skipped). GPU=1
# marks a check that measures on the GPU: one of them must pass for the run to pass.
check() {
    local name=$1
    shift
    local t0 rc status detail
    t0=$(date +%s%N)
    echo "== $name: $*"
    timeout "${TMO:-900}" "$@" > "$OUTDIR/logs/$name.log" 2>&1
    rc=$?
    case $rc in 0) status=pass; [ "$1" = ctest ] && no_test_passed "$OUTDIR/logs/$name.log" && status=skipped ;; 77) status=skipped ;; 124) status="FAIL (over ${TMO:-900} s)"; FAILED=1 ;;
        *) status="FAIL (exit $rc)"; FAILED=1 ;; esac
    detail=$(grep -E 'tests passed|tests failed|ERROR SUMMARY|error|Error|FAIL' "$OUTDIR/logs/$name.log" | tail -2 | tr '\n' ' ' | cut -c1-300)
    printf '{"who":"check","check":"%s","status":"%s","seconds":%d.%03d,"command":%s,"detail":%s}\n' "$name" "$status" \
        $(( ($(date +%s%N) - t0) / 1000000000 )) $(( ($(date +%s%N) - t0) / 1000000 % 1000 )) \
        "$(json_str "${*//$ROOT/.}")" "$(json_str "$detail")" >> "$RES"
    [ "$status" = pass ] && [ "${GPU:-0}" = 1 ] && GPU_PASSED=$((GPU_PASSED + 1))
    echo "   $status ($name)"
    [ $rc = 0 ] || tail -15 "$OUTDIR/logs/$name.log"
    return 0
}

if has env; then
    : > "$RES"
    printf '{"who":"meta","date":"%s","machine":%s,"command":%s,"quick":%d}\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" \
        "$(json_str "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)")" \
        "$(json_str "examples/gpu/check.sh $ARGS")" "$QUICK" >> "$RES"
    { nvidia-smi; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.backends.cudnn.version())';
      ls /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu 2>/dev/null | grep -E 'libnccl|libcudnn\.so' ; command -v mpirun compute-sanitizer; } \
        > "$OUTDIR/logs/env.log" 2>&1
fi
if has build; then
    # the default CUDA architectures, as users build it (DP_CHECK_CUDA_ARCH=native for a faster build)
    check configure cmake -S "$ROOT" -B "$BUILD" -DDP_WITH_CUDA=ON -DDP_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
        ${DP_CHECK_CUDA_ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$DP_CHECK_CUDA_ARCH}
    check build cmake --build "$BUILD" -j "$JOBS"
    [ -x "$D" ] || { echo "$me: the build failed; see $OUTDIR/logs/build.log" >&2; exit 1; }
    "$D" --version >> "$OUTDIR/logs/env.log" 2>&1
fi
if has tests; then
    GPU=1 check ctest-cuda ctest --test-dir "$BUILD" -L cuda --output-on-failure --timeout 900
    GPU=1 check ctest-nccl ctest --test-dir "$BUILD" -L nccl --output-on-failure --timeout 900 --no-tests=ignore
    # NCCL at one rank beside the sim on GPU 0: NCCL's device memory as measured at start (the
    # config line), both epoch times (recorded steps in both), the checkpoints bitwise
    rm -f "$OUTDIR/nccl-memory/results.jsonl"
    GPU=1 TMO=300 check nccl-memory env DPTRAIN="$D" examples/gpu/nccl_memory.sh --out "$OUTDIR/nccl-memory"
    grep -E '^nccl at|^epoch|^checkpoints' "$OUTDIR/logs/nccl-memory.log"
    cat "$OUTDIR/nccl-memory/results.jsonl" >> "$RES" 2>/dev/null
fi
if has sanitize; then
    # the kernel suite under each tool; the training suite under memcheck (the whole run only;
    # its child processes, the launcher tests' trainings, run unchecked: under memcheck they take
    # minutes each; API errors are dptrain's own to check, and NCCL probes its kernels with
    # calls that fail by design)
    for tool in memcheck racecheck synccheck initcheck; do
        GPU=1 check "sanitizer-$tool-kernels" compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
            "$BUILD/tests/test_cuda_kernels"
    done
    [ $QUICK = 1 ] || GPU=1 TMO=420 check sanitizer-memcheck-train env DPTRAIN="$D" DP_TEST_TMP="$BUILD/tests/tmp" \
        compute-sanitizer --tool memcheck --target-processes application-only --report-api-errors no \
        --error-exitcode 9 --print-limit 20 "$BUILD/tests/test_cuda_train"
fi
if has bench; then
    rounds=${ROUNDS:-$([ $QUICK = 1 ] && echo 1 || echo 3)}
    GPU=1 check bench env DPTRAIN="$D" examples/bench/gpu_vs_pytorch.sh --data "$DATA" --rounds $rounds --epochs 3 \
        --out "$OUTDIR/bench"
    cat "$OUTDIR/bench/results.jsonl" >> "$RES" 2>/dev/null
fi
if has accuracy && [ $QUICK = 0 ]; then
    GPU=1 check accuracy env DPTRAIN="$D" examples/bench/gpu_vs_pytorch.sh --data "$DATA" --cases none --accuracy \
        --skip-pytorch --out "$OUTDIR/accuracy"
    cat "$OUTDIR/accuracy/results.jsonl" >> "$RES" 2>/dev/null
fi
if has profiles; then
    GPU=1 TMO=300 check profiles examples/gpu/record_profiles.sh --build "$BUILD"
    mkdir -p "$OUTDIR/profiles" && cp sim/presets/h100-*.profile "$OUTDIR/profiles/" 2>/dev/null
fi
if has transfer; then
    GPU=1 TMO=300 check transfer examples/gpu/transfer_check.sh --build "$BUILD" --out "$OUTDIR/transfer"
    cat "$OUTDIR"/transfer/transfer-*.md 2>/dev/null
fi
if has multigpu; then
    # NCCL over several GPUs against the sim, bitwise, under every launcher: only where there are two
    ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
    if [ "$ngpus" -ge 2 ]; then
        GPU=1 TMO=900 check multigpu examples/gpu/multigpu.sh --build "$BUILD" --data "$DATA" --out "$OUTDIR/multigpu"
        cat "$OUTDIR/multigpu/results.jsonl" >> "$RES" 2>/dev/null
    else
        why="nvidia-smi -L lists $ngpus GPU(s); the multigpu phase needs 2 or more"
        echo "== multigpu: skipped: $why"
        printf '{"who":"check","check":"multigpu","status":"skipped","seconds":0,"command":%s,"detail":%s}\n' \
            "$(json_str examples/gpu/multigpu.sh)" "$(json_str "$why")" >> "$RES"
    fi
fi
if has cpu; then
    check ctest-cpu ctest --test-dir "$BUILD" -L 'cpu|mpi' -j "$JOBS" --output-on-failure --timeout 900
    check mpi-shapes env DPTRAIN="$D" examples/bench/mpi_vs_sim.sh --rounds 1 --epochs 3 --threads "$JOBS" \
        --ns "1 2 4 8" --data "$DATA" --out "$OUTDIR/mpi-vs-sim"
    # processes x threads on every core against PyTorch's best thread count; its table goes into
    # this tree's docs/results.md and $OUTDIR/cpu-shapes/cpu_shapes.md
    check cpu-shapes env DPTRAIN="$D" examples/bench/cpu_shapes.sh --data "$DATA" \
        --rounds "${ROUNDS:-$([ $QUICK = 1 ] && echo 1 || echo 3)}" --out "$OUTDIR/cpu-shapes"
fi

echo
python3 - "$RES" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("who") == "check":
        print("%-32s %-14s %6.0f s" % (r["check"], r["status"], r["seconds"]))
PY
[ -f "$OUTDIR/bench/gpu_vs_pytorch.md" ] && cat "$OUTDIR/bench/gpu_vs_pytorch.md"
[ -f "$OUTDIR/cpu-shapes/cpu_shapes.md" ] && cat "$OUTDIR/cpu-shapes/cpu_shapes.md"
# GPU phases asked for and not one GPU check passed: every one was skipped (the suites found no
# device) or failed; that is no result, whatever the statuses above say
if [ -n "$GPU_PHASES" ] && [ $GPU_PASSED = 0 ]; then
    nothing_measured "no GPU check passed (the phases $GPU_PHASES: every check skipped or failed; see $OUTDIR/logs)"
fi
exit $FAILED
