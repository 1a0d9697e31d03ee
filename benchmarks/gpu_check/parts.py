"""The GPU check's parts, in the order they run: each with its run (given the check and a deadline: its rows into
the result, its status back) and its section of gpu_check.md."""

import collections

from benchmarks.gpu_check import fairseq_runs, layers, modes, numerics
from benchmarks.gpu_check.plan import BUDGETS, QUICK_BUDGETS, QUICK_PARTS

Part = collections.namedtuple("Part", "name run summary")

PART = {part.name: part for part in (
    Part("correctness", numerics.run, numerics.summary),
    Part("speed_tokens", layers.run_tokens, layers.tokens_summary),
    Part("speed_batch1", layers.run_batch1, layers.batch1_summary),
    Part("modes", modes.run, modes.summary),
    Part("paper_configs", fairseq_runs.run_paper_configs, fairseq_runs.paper_configs_summary),
    Part("clean_exit", fairseq_runs.run_clean_exit, fairseq_runs.clean_exit_summary),
    Part("profile", layers.run_profile, layers.profile_summary),
)}
PARTS = tuple(PART)


def profile(quick):
    """(the parts in the order they run, each part's budget in seconds on an H100 or H200) of the full check or --quick."""
    return (QUICK_PARTS, QUICK_BUDGETS) if quick else (PARTS, BUDGETS)
