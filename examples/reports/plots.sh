#!/usr/bin/env bash
# examples/reports/plots.sh: the five reports' plots for the docs, docs/img/report-000.png .. 004.png.
# Runs each report script (examples/reports/00N_*.sh) in the given size into OUT/NNN and copies its
# plot.png to docs/img/report-NNN.png; the tables docs/reports.md quotes are OUT/NNN/table.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$ROOT/examples/lib/args.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--quick | --smoke | --full] [--out DIR] [--data DIR]
  writes docs/img/report-000.png .. report-004.png from the five report scripts' runs
  --quick     each script's --quick size (the default; the size docs/reports.md shows)
  --smoke     a few steps per run (to check this script, not for the docs)
  --full      each report's full size
  --out DIR   where each script's table, plot and logs go, in DIR/NNN (default: out/reports)
  --data DIR  passed on to the scripts (see any of them with --help)
environment: as the report scripts (DPTRAIN, MPIRUN, PYTHON)
USAGE
}
size=--quick out="$ROOT/out/reports" data=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick|--smoke) size=$1; shift ;;
        --full) size=""; shift ;;
        --out) need_value "$@"; need_nonempty --out "$2"; out=$2; shift 2 ;;
        --data) need_value "$@"; need_dir --data "$2"; data=(--data "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
mkdir -p "$out"
for script in "$HERE"/00[0-4]_*.sh; do
    id=$(basename "$script" | cut -c1-3)
    echo "plots.sh: $id: $(basename "$script") ${size:-(full size)}" >&2
    start=$(date +%s)
    "$script" ${size:+"$size"} --out "$out/$id" ${data[@]+"${data[@]}"} > "$out/$id.log" 2>&1 || {
        tail -20 "$out/$id.log" >&2
        echo "plots.sh: $(basename "$script") failed (its output: $out/$id.log)" >&2
        exit 1
    }
    cp "$out/$id/plot.png" "$ROOT/docs/img/report-$id.png"
    echo "plots.sh: $id: docs/img/report-$id.png ($(($(date +%s) - start)) s)" >&2
done
