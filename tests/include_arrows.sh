#!/usr/bin/env bash
# The folders' include arrows: every `#include "..."` in src/, kernels/, backends/ and sim/ must go to
# the file's own folder or to one its row of the table below names. The table is the allowed graph,
# bottom first; it has no cycle (checked too), so a header that includes a folder that includes it back
# fails here. The generated headers (dp_config.h, dp_devices.h, dp_backends.h: what this build has) may be
# included from any folder. Headers private to a folder (PRIVATE below) are included only there.
# Usage: include_arrows.sh [ROOT] (default: the checkout this script is in). Exit 1 on a forbidden arrow.
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$ROOT"

# folder: the folders its files may include
ALLOWED='
src/core:
kernels: src/core
kernels/cpu: kernels src/core
kernels/cuda: kernels src/core
src/nn: kernels src/core
src/optim: kernels src/core
src/data: src/core
src/io: src/nn kernels src/core
backends: kernels src/core
src/report: backends src/io src/core
src/exec: backends src/nn src/optim src/data kernels src/core
src/train: src/exec src/report src/io src/optim src/nn src/data backends kernels src/core
sim: src/train src/exec src/report src/io src/optim src/nn src/data backends kernels src/core
src/cli: sim src/train src/exec src/report src/io src/nn src/data backends kernels src/core
'
folder_of() { # path -> its folder in the table
    case "$1" in
        src/*) local r=${1#src/}; echo "src/${r%%/*}" ;;
        kernels/*/*) local r=${1#kernels/}; echo "kernels/${r%%/*}" ;;
        kernels/*) echo kernels ;;
        *) echo "${1%%/*}" ;;
    esac
}

declare -A allow
while IFS= read -r line; do
    [ -n "$line" ] || continue
    allow[${line%%:*}]=" ${line#*:} "
done <<<"$ALLOWED"

# The table itself has no cycle: repeatedly drop the folders whose allowed targets are all dropped.
left=("${!allow[@]}")
declare -A done_
while [ ${#left[@]} -gt 0 ]; do
    next=()
    for f in "${left[@]}"; do
        ok=1
        for t in ${allow[$f]}; do [ -n "${done_[$t]:-}" ] || ok=0; done
        if [ $ok = 1 ]; then done_[$f]=1; else next+=("$f"); fi
    done
    if [ ${#next[@]} -eq ${#left[@]} ]; then
        echo "include_arrows.sh: the allowed table has a cycle among: ${left[*]}" >&2
        exit 1
    fi
    left=("${next[@]}")
done

bad=0 n=0
while IFS= read -r -d '' file; do
    from=$(folder_of "$file")
    if [ -z "${allow[$from]+x}" ]; then
        echo "include_arrows.sh: $file: folder $from has no row in the table; add one" >&2
        bad=1
        continue
    fi
    dir=$(dirname "$file")
    while IFS=: read -r lineno inc; do
        n=$((n + 1))
        case "$inc" in dp_config.h|dp_devices.h|dp_backends.h) continue ;; esac
        target=""
        for cand in "$dir/$inc" "src/$inc" "$inc"; do
            if [ -f "$cand" ]; then target=$(realpath --relative-to=. "$cand"); break; fi
        done
        if [ -z "$target" ]; then
            echo "$file:$lineno: #include \"$inc\": no such file under $dir, src/ or the top" >&2
            bad=1
            continue
        fi
        to=$(folder_of "$target")
        [ "$to" = "$from" ] && continue
        case "${allow[$from]}" in *" $to "*) continue ;; esac
        echo "$file:$lineno: includes $target: $from may include only:${allow[$from]}(tests/include_arrows.sh)" >&2
        bad=1
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
             sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/')
done < <(find src kernels backends sim -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
             -o -name '*.h.in' \) -print0 | sort -z)

# Private headers: the executor's state (src/exec/executor_impl.h) is read only inside src/exec/;
# everything else, the tests included, goes through exec/executor.h's functions.
PRIVATE='
src/exec/executor_impl.h src/exec
'
while read -r header folder; do
    [ -n "$header" ] || continue
    while IFS= read -r hit; do
        echo "$hit: includes $(basename "$header"), which is private to $folder/; use its public header" >&2
        bad=1
    done < <(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"(exec/)?$(basename "$header")\"" \
                 src kernels backends sim tests examples --include='*.c' --include='*.h' --include='*.cu' \
                 --include='*.cuh' 2>/dev/null | grep -v "^$folder/" | cut -d: -f1,2)
done <<<"$PRIVATE"

if [ $bad != 0 ]; then exit 1; fi
echo "include_arrows.sh: $n includes, every arrow allowed; private headers only in their folders"
