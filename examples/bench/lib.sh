# shellcheck shell=bash
# examples/bench/lib.sh: the prerequisite checks the bench scripts share (sourced after
# examples/lib/args.sh, not run). A script either stops at the first missing thing (need_built,
# need_dptrain, need_mpirun: one line, exit 1) or collects everything missing in the array `missing`
# and stops once with the whole list (fail_missing), so that a user fixes it all in one go.

# need_built NAME BIN [HINT]: BIN is executable, else "PROG: no NAME at BIN: build first[ HINT]", exit 1;
# need_dptrain: the same for $DPTRAIN
need_built() {
    [ -x "$2" ] || { echo "$(_args_prog): no $1 at $2: build first${3:+ $3}" >&2; exit 1; }
}
need_dptrain() { need_built dptrain "$DPTRAIN"; }

# need_mpirun: mpirun on the PATH, else exit 1 naming the package
need_mpirun() {
    command -v mpirun > /dev/null || { echo "$(_args_prog): mpirun not found (apt-get install openmpi-bin)" >&2; exit 1; }
}

# set_only ONLY: RUN_DP and RUN_PT from --only ("": both, dptrain or pytorch), else a usage error
set_only() {
    case "$1" in ""|dptrain|pytorch) ;; *) die_usage "--only: expected dptrain or pytorch, got '$1'" ;; esac
    RUN_DP=1 RUN_PT=1
    if [ "$1" = pytorch ]; then RUN_DP=0; fi
    if [ "$1" = dptrain ]; then RUN_PT=0; fi
}

# want_dptrain: with RUN_DP=1, adds $DPTRAIN to `missing` unless it is executable (--only pytorch skips it)
want_dptrain() {
    [ "${RUN_DP:-1}" = 0 ] || [ -x "$DPTRAIN" ] || missing+=("dptrain binary: '$DPTRAIN' does not exist or is not executable. Build it (cmake -S . -B build && cmake --build build -j2), set DPTRAIN=/path/to/dptrain, or use --only pytorch.")
}

# find_python CODE: PY is the first of $PYTHON (alone, when set: it is not second-guessed), python3,
# /usr/bin/python3 that runs CODE ("" for any python3); PY is empty if none does
find_python() {
    PY=""
    local cand
    for cand in ${PYTHON:+"$PYTHON"} python3 /usr/bin/python3; do
        if command -v "$cand" >/dev/null 2>&1 && { [ -z "$1" ] || "$cand" -c "$1" >/dev/null 2>&1; }; then
            PY=$cand
            return 0
        fi
        if [ -n "${PYTHON:-}" ]; then break; fi
    done
}

# want_fashion_mnist DIR: adds to `missing` each Fashion-MNIST file DIR lacks (plain or .gz)
want_fashion_mnist() {
    local f
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        [ -f "$1/$f.gz" ] || [ -f "$1/$f" ] || missing+=("$1/$f(.gz): Fashion-MNIST is not there (apt-get install dataset-fashion-mnist, or --data DIR).")
    done
}

# fail_missing: with anything in `missing`, "PROG: cannot run, missing:" and the list, exit 1
fail_missing() {
    if [ ${#missing[@]} -gt 0 ]; then
        echo "$(_args_prog): cannot run, missing:" >&2
        printf '  - %s\n' "${missing[@]}" >&2
        exit 1
    fi
}
