#!/usr/bin/env bash
# A long run from one commit: a clean clone of this repository at COMMIT in WORKDIR, its own `make setup`, and
# COMMAND run inside it, so that work on the code meanwhile does not change the run midway.
set -euo pipefail

usage="usage: scripts/at_commit.sh [--no-setup] COMMIT WORKDIR -- COMMAND...

Clones this repository at COMMIT (a commit, branch or tag of it) into WORKDIR, runs 'make setup' there
(its own .venv; --no-setup skips it), and runs COMMAND in WORKDIR with WORKDIR/.venv/bin first on PATH,
WORKDIR first on PYTHONPATH (its packages, not those another checkout installed, are the ones imported) and
AT_COMMIT set to the full commit. The commit goes to WORKDIR/commit.txt and to the first line of
the output. WORKDIR that is already a clone at COMMIT with no changes to its tracked files is used again
(a resumed run); any other existing WORKDIR is refused, as is a clone whose tracked files have changed.
A record written there names that commit (scripts/paper_table.py --record writes it into meta.json).

  scripts/at_commit.sh HEAD ../runs/mt -- python scripts/paper_table.py --table mt --work ../work ..."

setup=1
[[ ${1:-} == -h || ${1:-} == --help ]] && { echo "$usage"; exit 0; }
[[ ${1:-} == --no-setup ]] && { setup=0; shift; }
[[ $# -ge 4 && $3 == -- ]] || { echo "$usage" >&2; exit 2; }
commit=$1 work=$2
shift 3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "error: $*" >&2; exit 1; }
sha=$(git -C "$ROOT" rev-parse --verify --quiet "$commit^{commit}") || die "no commit '$commit' in $ROOT"
changed() { [[ -n $(git -C "$work" status --porcelain --untracked-files=no) ]]; }

if [[ -e $work && -n $(ls -A "$work") ]]; then
    have=$(git -C "$work" rev-parse --verify --quiet HEAD 2>/dev/null) && \
        [[ $(git -C "$work" rev-parse --show-toplevel) == $(cd "$work" && pwd -P) ]] || \
        die "'$work' exists and is not a clone: give a new folder"
    [[ $have == "$sha" ]] || die "'$work' is a clone at $have, not $sha: give a new folder"
else
    git clone --quiet --no-checkout "$ROOT" "$work"  # an empty folder may be given
    git -C "$work" checkout --quiet --detach "$sha"
fi
changed && die "'$work' has changes to its tracked files: a run there would not be the commit's"
echo "$sha" > "$work/commit.txt"
echo "commit $sha"

cd "$work"
if [[ $setup == 1 ]]; then
    make setup
fi
export AT_COMMIT=$sha PATH=$PWD/.venv/bin:$PATH PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
exec "$@"
