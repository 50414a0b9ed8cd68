# shellcheck shell=bash
# examples/lib/args.sh: the argument checks every example script shares (sourced, not run), so that
# each answers as dptrain does: a bad argument is one line naming it, exit 2, before anything runs;
# a run that measured nothing is a failure (exit 1), never an empty table. Messages start with
# $PROG (default: the script's name). In a script:
#   . "$ROOT/examples/lib/args.sh"
#   while [ $# -gt 0 ]; do
#       case "$1" in
#           --rounds) need_value "$@"; ROUNDS=$2; shift 2 ;;
#           *) unknown_arg "$1" ;;
#       esac
#   done
#   need_uint --rounds "$ROUNDS" 1

_args_prog() { printf '%s' "${PROG:-$(basename "$0")}"; }

# die_usage MESSAGE: "PROG: MESSAGE; see --help" on stderr, exit 2
die_usage() {
    printf '%s: %s; see %s --help\n' "$(_args_prog)" "$*" "$(_args_prog)" >&2
    exit 2
}

# unknown_arg ARG
unknown_arg() { die_usage "$1: unknown argument"; }

# need_value "$@": the flag in $1 has a value in $2 (call it with the parser's whole argument list);
# a next word that is a long flag (--out) is taken for a forgotten value, as dptrain does.
# need_value_any "$@": the same, for flags whose value may itself hold flags (--extra '--nesterov')
need_value() {
    [ $# -ge 2 ] || die_usage "$1: missing value"
    [[ $2 != --[a-z]* ]] || die_usage "$1: missing value (the next word is the flag $2)"
}
need_value_any() { [ $# -ge 2 ] || die_usage "$1: missing value"; }

# need_uint FLAG VALUE MIN [NOTE]: VALUE is a decimal integer >= MIN (at most 9 digits)
need_uint() {
    if [[ $2 =~ ^[0-9]{1,9}$ ]] && [ $((10#$2)) -ge "$3" ]; then return 0; fi
    die_usage "$1: expected an integer >= $3${4:+ ($4)}, got '$2'"
}

# need_uints FLAG "LIST" MIN: a non-empty list of such integers, separated by spaces or commas
need_uints() {
    local v n=0
    for v in ${2//,/ }; do need_uint "$1" "$v" "$3"; n=$((n + 1)); done
    [ $n -gt 0 ] || die_usage "$1: expected one or more integers >= $3, got '$2'"
}

# need_number FLAG VALUE MIN: a decimal number (no exponent) >= MIN; MIN 0+ means above 0
need_number() {
    if [[ $2 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]]; then
        if [ "$3" = 0+ ]; then
            awk -v x="$2" 'BEGIN { exit !(x + 0 > 0) }' && return 0
            die_usage "$1: expected a number above 0, got '$2'"
        fi
        awk -v x="$2" -v m="$3" 'BEGIN { exit !(x + 0 >= m + 0) }' && return 0
    fi
    [ "$3" = 0+ ] && die_usage "$1: expected a number above 0, got '$2'"
    die_usage "$1: expected a number >= $3, got '$2'"
}

# need_choice FLAG VALUE CHOICE...: VALUE is one of the choices
need_choice() {
    local flag=$1 v=$2 c
    shift 2
    for c in "$@"; do [ "$v" = "$c" ] && return 0; done
    die_usage "$flag: expected one of $(IFS=,; echo "$*"), got '$v'"
}

# need_choices FLAG "A,B" CHOICE...: a non-empty comma-separated list of the choices
need_choices() {
    local flag=$1 list=$2 v n=0
    shift 2
    for v in ${list//,/ }; do need_choice "$flag" "$v" "$@"; n=$((n + 1)); done
    [ $n -gt 0 ] || die_usage "$flag: expected one or more of $(IFS=,; echo "$*"), got '$list'"
}

# need_nonempty FLAG VALUE
need_nonempty() { [ -n "$2" ] || die_usage "$1: expected a value, got ''"; }

# need_dir FLAG DIR, need_file FLAG FILE: an existing directory, a readable file
need_dir() { [ -d "$2" ] || die_usage "$1: '$2' is not a directory"; }
need_file() { if [ ! -f "$2" ] || [ ! -r "$2" ]; then die_usage "$1: '$2' is not a readable file"; fi; }

# nothing_measured WHY: the run produced no figure: "PROG: nothing was measured: WHY", exit 1
nothing_measured() {
    printf '%s: nothing was measured: %s\n' "$(_args_prog)" "$*" >&2
    exit 1
}
