# examples/reports/lib.sh: what the five report scripts share (sourced, not run).
# report_main ID "title" "$@": parses [--quick|--smoke] [--out DIR] [--data DIR], checks the
# prerequisites and runs examples/reports/reports.py for report ID.

REPORTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPORTS_ROOT=$(cd "$REPORTS_DIR/../.." && pwd)
. "$REPORTS_ROOT/examples/lib/args.sh"

report_usage() {
    cat <<EOF
usage: $(basename "$0") [--quick | --smoke] [--out DIR] [--data DIR]
  $1
  --quick     a shorter run (fewer epochs or steps; under 10 minutes on 2 cores)
  --smoke     a few steps per run (seconds): for the test suite
  --out DIR   where the table (table.md), the plot (plot.png), the logs and results.json go
              (default: out/reports/$2)
  --data DIR  the report's data set (CIFAR-10 binary version or MNIST IDX files); without it,
              MNIST reports use Fashion-MNIST (same shape and size) or synthetic data, CIFAR-10
              reports synthetic data of CIFAR-10's shape and size (the table says which)
environment: DPTRAIN (default build/dptrain), MPIRUN (default mpirun; MPIRUN= skips the MPI runs),
             PYTHON (a python3 with matplotlib; default: the first of python3, /usr/bin/python3 that has it)
EOF
}

report_main() {
    local id=$1 title=$2
    shift 2
    local size=full out="$REPORTS_ROOT/out/reports/$id" data=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --quick) size=quick; shift ;;
            --smoke) size=smoke; shift ;;
            --out) need_value "$@"; need_nonempty --out "$2"; out=$2; shift 2 ;;
            --data) need_value "$@"; need_dir --data "$2"; data=$2; shift 2 ;;
            -h|--help) report_usage "$title" "$id"; exit 0 ;;
            *) unknown_arg "$1" ;;
        esac
    done
    local dptrain=${DPTRAIN:-$REPORTS_ROOT/build/dptrain}
    if [ ! -x "$dptrain" ]; then
        echo "$(basename "$0"): no dptrain at $dptrain: build it first (cmake -S . -B build && cmake --build build -j2) or set DPTRAIN" >&2
        exit 1
    fi
    local py=${PYTHON:-}
    if [ -z "$py" ]; then
        for cand in python3 /usr/bin/python3; do
            if command -v "$cand" > /dev/null 2>&1 && "$cand" -c 'import matplotlib' > /dev/null 2>&1; then py=$cand; break; fi
        done
    fi
    if [ -z "$py" ] || ! "$py" -c 'import matplotlib' > /dev/null 2>&1; then
        echo "$(basename "$0"): needs python3 with matplotlib for the plot (Debian: apt-get install -y python3-matplotlib; or set PYTHON)" >&2
        exit 1
    fi
    local mpirun=${MPIRUN-mpirun}
    if [ -n "$mpirun" ] && ! command -v "$mpirun" > /dev/null 2>&1; then
        echo "$(basename "$0"): note: no $mpirun: the MPI runs are left out (Debian: apt-get install -y openmpi-bin libopenmpi-dev, then rebuild)" >&2
        mpirun=""
    fi
    if [ -n "$mpirun" ] && ! "$dptrain" --version 2>&1 | grep -q 'mpi (cpu'; then
        echo "$(basename "$0"): note: this dptrain was built without MPI: the MPI runs are left out" >&2
        mpirun=""
    fi
    mkdir -p "$out"
    exec "$py" "$REPORTS_DIR/reports.py" --report "$id" --size "$size" --out "$out" --data "$data" \
        --dptrain "$dptrain" --mpirun "$mpirun"
}
