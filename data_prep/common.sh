# Shared helpers of the data_prep scripts (sourced, not run).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then  # run by itself: say what it is
    usage="usage: source data_prep/common.sh (from a script): the helpers that data_prep/prepare_*.sh are
sourced with; it does nothing by itself. Run one of those with --help."
    if [[ ${1:-} == -h || ${1:-} == --help ]]; then echo "$usage"; exit 0; fi
    echo "$usage" >&2; exit 1
fi
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "error: $*" >&2; exit 1; }
STEP=""
step() { STEP=$*; echo; echo "==> $*"; }
# need_file FILE...: each file is there and not empty
need_file() {
    local f
    for f in "$@"; do
        [[ -e $f ]] || die "missing input file $f"
        [[ -s $f ]] || die "input file $f is empty (0 bytes)"
    done
}
# need_text FILE...: each file holds UTF-8 text, not only blank lines (which would give an empty vocabulary);
# other bytes would be altered without a word further on (data_prep/utf8_check.py)
need_text() {
    local f
    for f in "$@"; do
        need_file "$f"
        grep -q '[^[:space:]]' "$f" || die "input file $f holds only blank lines"
    done
    quietly "$HERE/utf8_check.py" "$@" || exit 1
}
need_cmd() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: run 'make setup' and put .venv/bin on PATH"; }
# need_count NAME MIN WHAT: the variable NAME holds a whole number >= MIN (a typo would otherwise fail steps later,
# in another tool's words, or not at all); WHAT says what it counts, and its default
need_count() {
    local value=${!1}
    [[ $value =~ ^[0-9]+$ ]] && (( 10#$value >= $2 )) || die "$1=$value must be a whole number of at least $2 ($3)"
}
# need_number NAME WHAT: the variable NAME holds a number above 0 (1.5, 2)
need_number() {
    local value=${!1}
    [[ $value =~ ^[0-9]*\.?[0-9]+$ && $value =~ [1-9] ]] || die "$1=$value must be a number above 0 ($2)"
}

# quietly TOOL ARGS...: run a Python tool (a data_prep/*.py file, or a console script of the environment such as
# subword-nmt) with Ctrl-C's default action, so that it ends without Python's KeyboardInterrupt traceback (and
# without one from each of its worker processes): the trap below says what happened, in one line
quietly() {
    local tool=$1
    [[ -f $tool ]] || tool=$(command -v "$1") || die "$1 not found: run 'make setup' and put .venv/bin on PATH"
    shift
    "$PYTHON" -c 'import os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")' "$tool" "$@"
}

# made_here PATH...: a PATH that does not exist yet is removed again if the script fails, and so is each of
# its missing parent folders that is then empty: a failed run leaves nothing that was not there before.
# Downloads are not passed: they stay, for the next run to resume.
MADE=() MADE_PARENTS=()
made_here() {
    local p parent
    for p in "$@"; do
        [[ -e $p ]] && continue
        MADE+=("$p")
        parent=$(dirname "$p")
        while [[ ! -e $parent ]]; do MADE_PARENTS+=("$parent"); parent=$(dirname "$parent"); done
    done
}
remove_made_on_failure() {
    local rc=$? p
    (( rc == 0 )) && return
    trap '' INT TERM  # a second Ctrl-C does not cut the clean-up short
    for p in "${MADE[@]}"; do rm -rf "$p"; done
    # the deepest first; a folder with anything in it stays
    while IFS= read -r p; do rmdir "$p" 2>/dev/null || true; done \
        < <(for p in "${MADE_PARENTS[@]}"; do echo "${#p} $p"; done | sort -rn | cut -d' ' -f2-)
    if [[ -n $INTERRUPTED ]]; then  # on a line of its own: the terminal's ^C, or a progress bar, ends the last one
        printf '\ninterrupted%s: what this run made is removed (downloads stay); the same command starts again\n' \
            "${STEP:+ during $STEP}" >&2
    fi
    return "$rc"
}
# Ctrl-C or kill: exit 130 (143), which the EXIT trap sees (bash ending on the signal itself would show it 0)
INTERRUPTED=""
trap 'INTERRUPTED=1; exit 130' INT
trap 'INTERRUPTED=1; exit 143' TERM
trap remove_made_on_failure EXIT

# fetch DIR URL[#sha256=HEX]...: resumable, verified downloads (data_prep/fetch.py)
fetch() { local out=$1; shift; quietly "$HERE/fetch.py" --out "$out" "$@"; }

# A destination that holds something other than fairseq-preprocess output is not ours to replace.
check_dest() {
    local dest=$1
    if [[ -e $dest && -n $(ls -A "$dest") && ! -e $dest/preprocess.log ]]; then
        die "$dest exists and is not a fairseq-preprocess output folder; choose another DEST"
    fi
}

# preprocess_into DEST ARGS...: fairseq-preprocess into DEST.tmp, then replace DEST, so that a
# failed run leaves the old data untouched and a re-run never meets "dictionary already exists".
preprocess_into() {
    local dest=$1; shift
    check_dest "$dest"
    rm -rf "$dest.tmp"
    quietly fairseq-preprocess --destdir "$dest.tmp" "$@"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
}

