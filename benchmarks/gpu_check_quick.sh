#!/usr/bin/env bash
# usage: bash benchmarks/gpu_check_quick.sh [OUT_DIR] [gpu_check options]
# The quick GPU check (python -m benchmarks.gpu_check --quick; docs/gpu_check.md) in one command on a CUDA machine
# where nothing is set up: finds or makes a Python with torch and fairseq, then runs the check with a hard time
# limit. It fits a job of 8 minutes on an H100 or H200 that has torch (its set-up then takes about 30 s).
# Writes OUT_DIR (default benchmarks/results/gpu_quick): gpu_check.json, gpu_check.md, gpu_check.log, setup.log.
# With --smoke among the options it runs on the CPU at tiny sizes, without the time limit.
#
# The environment may set:
#   PYTHON      the Python to run (default: .venv/bin/python where `make setup` made one with fairseq,
#               else a venv made at $VENV on the machine's torch: python3 -m venv --system-site-packages)
#   VENV        where that venv goes (default /tmp/gpu_check_venv)
#   WHEELS      a folder of wheels to install fairseq and its needs from, without a package index
#               (default .whl, where present; docs/gpu_check.md says how to fill it)
#   TORCH       what pip installs where the machine has no torch (default torch; minutes, not in the 8)
#   WORK        the check's --work (default /tmp/gpu_check_work)
#   TIME_LIMIT  seconds after which the check is stopped (default 450: gpu_check.QUICK_LIMIT); the tables
#               are written after every row, so a stopped check leaves what it measured
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

OUT_DIR=benchmarks/results/gpu_quick
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then OUT_DIR=$1; shift; fi
VENV=${VENV:-/tmp/gpu_check_venv}
WHEELS=${WHEELS:-.whl}
TORCH=${TORCH:-torch}
WORK=${WORK:-/tmp/gpu_check_work}
TIME_LIMIT=${TIME_LIMIT:-450}
FAIRSEQ=ve-fairseq==0.12.3  # as the Makefile's FAIRSEQ: installed without its dependencies (it lists torchaudio)
# what the check imports besides torch (python module=pip requirement): fairseq's runtime needs of requirements.txt,
# and sacrebleu, which fairseq imports at start
NEEDS="hydra=hydra-core==1.3.2 omegaconf=omegaconf==2.3.0 bitarray=bitarray regex=regex tqdm=tqdm cffi=cffi
sklearn=scikit-learn packaging=packaging sacrebleu=sacrebleu"
SMOKE=0
for arg in "$@"; do [ "$arg" = --smoke ] && SMOKE=1; done

mkdir -p "$OUT_DIR" || exit 1
SETUP_LOG=$OUT_DIR/setup.log
: > "$SETUP_LOG"
say() { echo "[gpu_check_quick] $*" | tee -a "$SETUP_LOG"; }
die() { say "$*"; exit 2; }
START=$SECONDS

missing() {  # the pip requirements of NEEDS whose module $1 cannot import
    "$1" - "$NEEDS" <<'EOF'
import importlib.util, sys
print(" ".join(req for pair in sys.argv[1].split() for module, req in [pair.split("=", 1)]
               if importlib.util.find_spec(module) is None))
EOF
}
ready() { "$1" -c "import torch, fairseq" >/dev/null 2>&1 && [ -z "$(missing "$1")" ]; }

if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
elif [ -x .venv/bin/python ] && ready .venv/bin/python; then
    PY=.venv/bin/python
else
    PY=$VENV/bin/python
    if [ ! -x "$PY" ]; then
        say "making $VENV on the machine's Python and its packages (torch, where it has one)"
        python3 -m venv --system-site-packages "$VENV" >> "$SETUP_LOG" 2>&1 || die "python3 -m venv failed: $SETUP_LOG"
    fi
    if ! ready "$PY"; then
        PIP=("$PY" -m pip install -q --disable-pip-version-check --no-compile)
        if [ -d "$WHEELS" ]; then
            # the folder holds fairseq and what the machine lacks, each wheel without its dependencies
            say "installing the wheels of $WHEELS, without a package index"
            "${PIP[@]}" --no-index --no-deps "$WHEELS"/*.whl >> "$SETUP_LOG" 2>&1 || die "installing $WHEELS failed: $SETUP_LOG"
        else
            PIP+=(--retries 1 --timeout 30)
            if ! "$PY" -c "import torch" >/dev/null 2>&1; then
                say "no torch on this machine: installing $TORCH (minutes)"
                "${PIP[@]}" "$TORCH" >> "$SETUP_LOG" 2>&1 || die "installing $TORCH failed: $SETUP_LOG"
            fi
            NEED=$(missing "$PY")
            if [ -n "$NEED" ]; then
                say "installing $NEED"
                # shellcheck disable=SC2086  # one word a requirement
                "${PIP[@]}" $NEED >> "$SETUP_LOG" 2>&1 || die "installing $NEED failed (no package index? see WHEELS): $SETUP_LOG"
            fi
            say "installing $FAIRSEQ"
            "${PIP[@]}" --no-deps "$FAIRSEQ" >> "$SETUP_LOG" 2>&1 || die "installing $FAIRSEQ failed: $SETUP_LOG"
        fi
    fi
fi
ready "$PY" || die "$PY cannot import torch, fairseq and $(missing "$PY"); see $SETUP_LOG"

export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$PY" -W ignore -c "import sys, torch, fairseq; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| CUDA', torch.cuda.is_available(), '| fairseq', fairseq.__version__)" 2>> "$SETUP_LOG"
} | tee -a "$SETUP_LOG"
say "set-up: $((SECONDS - START)) s; $PY"

COMMAND=("$PY" -m benchmarks.gpu_check --quick --out "$OUT_DIR" --work "$WORK" "$@")
if [ "$SMOKE" = 0 ]; then
    # the whole process group (fairseq's training runs too) is stopped at the limit
    COMMAND=(timeout --kill-after=10 "$TIME_LIMIT" "${COMMAND[@]}")
fi
"${COMMAND[@]}" 2>&1 | tee "$OUT_DIR/gpu_check.log"
RC=${PIPESTATUS[0]}
if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
    say "the check was stopped after $TIME_LIMIT s; $OUT_DIR/gpu_check.md holds what it measured"
fi
say "exit code $RC, $((SECONDS - START)) s in all"
exit "$RC"
