#!/usr/bin/env bash
# The files the docs name exist: every path in README.md and docs/*.md that starts with one of the
# tree's top folders (src/, kernels/, backends/, sim/, tests/, examples/, cmake/, docs/) names a file or
# folder of the checkout, or a glob (`kernels/cpu/*.c`) that matches one. A trailing `:123` (a line) and
# punctuation are not part of the path; a component in capitals (`sim/presets/NAME`) or in angle
# brackets, and a brace list, are placeholders and are not checked.
# Usage: doc_paths.sh [ROOT] (default: the checkout this script is in). Exit 1 naming each missing path.
set -euo pipefail
ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$ROOT"

# Names known to be stale in a doc being rewritten elsewhere: "doc path", one a line. Each is to be
# fixed in that doc and removed here.
STALE='
'

bad=0 n=0
while IFS= read -r hit; do
    doc=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    path=${rest#*:}
    path=${path%%:*}                              # a line number after the path
    while [[ "$path" =~ [.,\;\)]$ ]]; do path=${path%?}; done
    case "$path" in *'{'*|*'<'*) continue ;; esac
    [[ "/$path/" =~ /[A-Z][A-Z0-9_]+[/.] ]] && continue # a placeholder: sim/presets/NAME
    n=$((n + 1))
    if [[ "$path" == *'*'* ]]; then
        compgen -G "$path" >/dev/null && continue
    elif [ -e "$path" ]; then
        continue
    fi
    grep -qx "$doc $path" <<<"$STALE" && continue
    echo "$doc:$line: names $path, which is not in the tree" >&2
    bad=1
done < <(grep -noE '(^|[^A-Za-z0-9_./-])(src|kernels|backends|sim|tests|examples|cmake|docs)/[A-Za-z0-9_./*{},<>:-]*' \
             README.md docs/*.md | sed -E 's#^([^:]+:[0-9]+:)[^A-Za-z]?#\1#')

if [ $bad != 0 ]; then exit 1; fi
echo "doc_paths.sh: $n paths named in README.md and docs/, every one in the tree"
