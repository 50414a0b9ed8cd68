#!/usr/bin/env bash
# The files' call loops: no two files of different folders may call each other, directly or through
# other files. The file-level call graph comes from the built objects of the dptrain library (and of
# the GPU plugin where it was built): a file calls another when its object leaves a symbol undefined
# that the other's object defines (nm). A loop inside one folder is one module's private business (the
# executor's files, NCCL's nccl.c and nccl_coll.c) and is only listed; a loop through two folders fails.
# ALLOWED below lists the calls that may close such a loop anyway, each with its reason.
# Usage: call_loops.sh BUILD_DIR. Exit 1 on a loop across folders, 2 when BUILD_DIR has no objects.
set -euo pipefail
BUILD=${1:?usage: call_loops.sh BUILD_DIR}

# from -> to: why this call may close a loop (none today)
ALLOWED='
'

objs=()
for d in "$BUILD"/CMakeFiles/dptrain_core.dir "$BUILD"/CMakeFiles/dp_kernels_*.dir "$BUILD"/CMakeFiles/dptrain_gpu.dir; do
    [ -d "$d" ] || continue
    while IFS= read -r -d '' o; do objs+=("$o"); done < <(find "$d" -name '*.o' -print0)
done
if [ ${#objs[@]} -eq 0 ]; then
    echo "call_loops.sh: no objects under $BUILD/CMakeFiles/dptrain_core.dir; build dptrain first" >&2
    exit 2
fi

# "source-file kind symbol" per line: kind D (defined, global) or U (undefined). The three CPU kernel
# variants' objects (dp_kernels_{base,v3,v4}) are one source file.
for o in "${objs[@]}"; do
    src=${o#*.dir/}
    src=${src%.o}
    nm -P "$o" | awk -v f="$src" '
        $2 ~ /^[TDBRCVWGSiu]$/ { print f, "D", $1 }
        $2 ~ /^[Uwv]$/         { print f, "U", $1 }'
done | awk -v allowed="$ALLOWED" '
function folder(p,  r) {
    if (p ~ /^src\//) { r = substr(p, 5); sub(/\/.*/, "", r); return "src/" r }
    if (p ~ /^kernels\/[^\/]+\//) { r = substr(p, 9); sub(/\/.*/, "", r); return "kernels/" r }
    r = p; sub(/\/.*/, "", r); return r
}
BEGIN {
    n_allow = split(allowed, al, "\n")
    for (i = 1; i <= n_allow; i++) {
        if (al[i] !~ /->/) continue
        split(al[i], parts, ":"); split(parts[1], ft, /[ \t]*->[ \t]*/)
        gsub(/[ \t]/, "", ft[1]); gsub(/[ \t]/, "", ft[2]); skip[ft[1], ft[2]] = 1
    }
}
{ files[$1] = 1 }
$2 == "D" { def[$3] = $1; next }
{ use[++nu] = $1; usym[nu] = $3 }
END {
    n = 0
    for (f in files) { id[f] = ++n; name[n] = f }
    for (k = 1; k <= nu; k++) {
        a = use[k]; s = usym[k]
        if (!(s in def)) continue          # libc, OpenBLAS, CUDA, ...
        b = def[s]
        if (a == b || ((a, b) in skip)) continue
        if (!((id[a], id[b]) in edge)) { edge[id[a], id[b]] = s; adj[id[a]] = adj[id[a]] " " id[b] }
    }
    # reach[i, j]: j is reached from i (a depth-first walk from every file)
    for (i = 1; i <= n; i++) {
        top = 0; stack[++top] = i
        while (top > 0) {
            v = stack[top--]
            m = split(adj[v], nx, " ")
            for (t = 1; t <= m; t++)
                if (!((i, nx[t]) in reach)) { reach[i, nx[t]] = 1; stack[++top] = nx[t] }
        }
    }
    # the loops: files that reach each other, grouped
    bad = 0
    for (i = 1; i <= n; i++) {
        if (i in grouped || !((i, i) in reach)) continue
        members = ""; folders = ""; nf = 0; delete seenf
        for (j = 1; j <= n; j++)
            if (j == i || (((i, j) in reach) && ((j, i) in reach))) {
                grouped[j] = 1; members = members " " j
                fo = folder(name[j]); if (!(fo in seenf)) { seenf[fo] = 1; nf++; folders = folders " " fo }
            }
        m = split(members, mem, " ")
        what = (nf > 1) ? "FAIL: a call loop across" folders : "note: a call loop inside" folders " (allowed)"
        printf "%s:\n", what
        for (x = 1; x <= m; x++)
            for (y = 1; y <= m; y++)
                if ((mem[x], mem[y]) in edge)
                    printf "    %s -> %s (%s)\n", name[mem[x]], name[mem[y]], edge[mem[x], mem[y]]
        if (nf > 1) bad++
    }
    if (bad) {
        printf "call_loops.sh: %d call loop(s) across folders; move the called function down, pass a callback, " \
               "or list the call in ALLOWED with its reason\n", bad
        exit 1
    }
    printf "call_loops.sh: %d files, no call loop across folders\n", n
}'
