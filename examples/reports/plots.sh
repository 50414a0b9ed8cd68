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
usage: $(basename "$0") [--quick | --smoke | --full | --replot] [--out DIR] [--data DIR]
  writes docs/img/report-000.png .. report-004.png from the five report scripts' runs
  --quick     each script's --quick size (the default; the size docs/reports.md shows)
  --smoke     a few steps per run (to check this script, not for the docs)
  --full      each report's full size
  --replot    runs nothing: draws each OUT/NNN/plot.png again from its results.json, and copies it
  --out DIR   where each script's table, plot and logs go, in DIR/NNN (default: out/reports)
  --data DIR  passed on to the scripts (see any of them with --help)
environment: as the report scripts (DPTRAIN, MPIRUN, PYTHON)
USAGE
}
size=--quick out="$ROOT/out/reports" data=() replot=0
while [ $# -gt 0 ]; do
    case "$1" in
        --quick|--smoke) size=$1; shift ;;
        --full) size=""; shift ;;
        --replot) replot=1; shift ;;
        --out) need_value "$@"; need_nonempty --out "$2"; out=$2; shift 2 ;;
        --data) need_value "$@"; need_dir --data "$2"; data=(--data "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) unknown_arg "$1" ;;
    esac
done
py=""
if [ "$replot" = 1 ]; then   # a python3 with matplotlib, found as the report scripts find it
    for cand in ${PYTHON:-} python3 /usr/bin/python3; do
        if command -v "$cand" > /dev/null 2>&1 && "$cand" -c 'import matplotlib' > /dev/null 2>&1; then py=$cand; break; fi
    done
    [ -n "$py" ] || { echo "$(basename "$0"): needs python3 with matplotlib (apt-get install -y python3-matplotlib; or set PYTHON)" >&2; exit 1; }
fi
mkdir -p "$out"
for script in "$HERE"/00[0-4]_*.sh; do
    id=$(basename "$script" | cut -c1-3)
    [ "$replot" = 1 ] || echo "plots.sh: $id: $(basename "$script") ${size:-(full size)}" >&2
    start=$(date +%s)
    if [ "$replot" = 1 ]; then
        "$py" "$HERE/reports.py" --replot "$out/$id" > /dev/null
        cp "$out/$id/plot.png" "$ROOT/docs/img/report-$id.png"
        echo "plots.sh: $id: docs/img/report-$id.png (drawn again from $out/$id/results.json)" >&2
        continue
    fi
    "$script" ${size:+"$size"} --out "$out/$id" ${data[@]+"${data[@]}"} > "$out/$id.log" 2>&1 || {
        tail -20 "$out/$id.log" >&2
        echo "plots.sh: $(basename "$script") failed (its output: $out/$id.log)" >&2
        exit 1
    }
    cp "$out/$id/plot.png" "$ROOT/docs/img/report-$id.png"
    echo "plots.sh: $id: docs/img/report-$id.png ($(($(date +%s) - start)) s)" >&2
done
