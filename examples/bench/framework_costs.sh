#!/usr/bin/env bash
# examples/bench/framework_costs.sh: PyTorch's per-step costs of DataParallel and DDP (beyond the
# step of one device), written as a .framework file for `dptrain predict --measured-epoch S
# --framework F` (docs/overhead-model.md, "Predicting from a measured single-device time").
# usage: framework_costs.sh [--python PY] [--device cpu|cuda] [--out FILE] [--reps N] [--quick]
#   --python PY   a python with PyTorch (default: $TORCH_PYTHON, build/torch2/bin/python, out/torch2/bin/python,
#                 python3: the first that imports torch; tests/torch2_env.sh makes one)
#   the rest goes to examples/bench/framework_costs.py (--help there)
# Example: examples/bench/framework_costs.sh --out sim/presets/pytorch-cpu.framework
# With a GPU: examples/bench/framework_costs.sh --device cuda --out pytorch-cuda.framework (DataParallel
# itself on 2+ GPUs).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/examples/lib/args.sh"
py=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --python) need_value "$@"; need_nonempty --python "$2"; py=$2; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ -z "$py" ]; then
    for cand in ${TORCH_PYTHON:-} "$root/build/torch2/bin/python" "$root/out/torch2/bin/python" python3; do
        if command -v "$cand" > /dev/null 2>&1 && "$cand" -c 'import torch' > /dev/null 2>&1; then py=$cand; break; fi
    done
fi
# none: python3 still checks the arguments, then says there is no torch (exit 2)
py=${py:-python3}
exec "$py" "$here/framework_costs.py" ${args[@]+"${args[@]}"}
