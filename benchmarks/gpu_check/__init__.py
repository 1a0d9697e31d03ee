"""The GPU check: is EVA right and fast on CUDA, in the settings people train with? One command, one table.

    make gpu-check        # = python -m benchmarks.gpu_check --out benchmarks/results/gpu
    make gpu-check-quick  # = python -m benchmarks.gpu_check --quick --out benchmarks/results/gpu_quick
    python -m benchmarks.gpu_check --smoke --out /tmp/smoke   # every part on the CPU at tiny sizes

Seven parts, run in this order, each within its own time budget (BUDGETS, about 16 minutes in all on an
H100 or H200; where a job may not run that long, --parts splits it: docs/gpu_check.md). --quick runs the
quick profile instead, which fits one 8-minute job: the Triton kernel's correctness in float32 and bfloat16,
the paper configs' words/s, then the modes table (QUICK_PARTS, QUICK_BUDGETS, settings()). A part that
fails or runs out of time keeps what it measured and the next part runs; gpu_check.json and gpu_check.md
are written again after every row, so a run that is killed leaves its table so far. The sample is binarised
in the background while the correctness part runs (which times nothing), so that its time is not added.
1. correctness: for each kernel that runs on CUDA (KERNELS), EVA on CUDA against the same module in float64
   on the CPU (whose kernels the test suite checks against the per-query definition): float32, float16,
   bfloat16 weights and autocast; bidirectional (left padding) and causal (right padding); training with a
   trainable RPE and evaluation; relative error ||a - ref|| / ||ref|| of the output and of all gradients.
   Then incremental decoding against the full forward, and attention dropout 0.1: the same seed replays
   the same masks, and the mean over many masks is the output without dropout. A kernel this code does
   not have, or one that refuses a call, is reported as such ("n/a"), not as a failure.
2. speed_tokens: one layer, forward + backward, bfloat16, d_model 512, 8 heads, 65,536 tokens a call
   (batch 64 x 1024 ... 2 x 32768): flash SDPA, bidirectional EVA (abs(E) 256, C 128), causal SDPA, causal
   EVA (window 128, chunks of 8), the EVA layers plain and with trainable RPE + attention dropout 0.1;
   time, peak memory, and the attention's achieved TFLOPS (attention_flops); the speed targets (TARGETS).
3. speed_batch1: the same at batch 1, N = 1024 ... 32768.
4. modes: the layer as users run it, at 8 x 8192 and 1 x 1024: each EVA layer eager and under each --eva-compile
   mode, beside the SDPA layers eager; time, host and GPU time a call, the whole layer's TFLOPS, the first
   pass (compiling), and the earlier record's time of the same layer (BEFORE).
5. paper_configs: fairseq-hydra-train --fp16 on the bundled sample, 60 updates of each config of
   PAPER_CONFIGS as users run it; words/s after the first logged interval, EVA against softmax.
6. clean_exit: the run that used to abort at exit (fairseq-train --fp16, 200 updates of the tiny EVA
   translation model; fairseq_eva/fairseq_fixes/clean_exit.py) must exit 0; then the same run with that fix switched
   off, which shows whether the cause is the one found.
7. profile: why a layer takes its time. Each EVA layer at 8 x 8192 (also with the bias alone and with
   dropout alone), one forward + backward: the time per call, the host's CPU time per call (launching,
   without waiting for the GPU) and the GPU's kernel time (torch.profiler); the larger of the last two
   bounds the first. The kernels that take the most time.
Writes gpu_check.json and gpu_check.md under --out; the binarised sample, the fairseq logs and run folders
under --work. How to run it, also on a machine without network access: docs/gpu_check.md.
"""
# ruff: noqa: F401  (the check's names, importable from the package: the tests and benchmarks/op_count.py use them)
# The parts' code: numerics.py (correctness), layers.py (the speed tables and the profile), modes.py, fairseq_runs.py
# (paper_configs, clean_exit); plan.py (settings, budgets), parts.py (the list of parts), report.py (gpu_check.json and
# gpu_check.md), run.py (the command line).

import sys
import types

from benchmarks.gpu_check import fairseq_runs, layers, modes, numerics, parts, plan, report, run
from benchmarks.gpu_check.fairseq_runs import (
    PAPER_CONFIGS,
    WITHOUT_FIX,
    clean_exit_check,
    cli,
    fairseq_env,
    hydra_overrides,
    paper_configs,
    prepare_data,
    run_tool,
    train_row,
)
from benchmarks.gpu_check.layers import (
    CAUSAL_WINDOW,
    CHUNK_SIZE,
    CHUNKS,
    D_MODEL,
    HEADS,
    LAYERS,
    PROFILE_LAYERS,
    WINDOW,
    attention_flops,
    auto_kernel,
    kernel_times,
    measure_speed,
    profile_layer,
    profile_part,
    ratios,
    speed_part,
)
from benchmarks.gpu_check.modes import BEFORE, MODE_LAYERS, layer_flops, mode_ratios, mode_rows, modes_part, recorded_times
from benchmarks.gpu_check.numerics import (
    CASES,
    attempt,
    case_checks,
    correctness,
    decoding_checks,
    dropout_checks,
    interpreter_limit,
    missing_kernel,
    pinned_noise,
    reference_cases,
    refused,
    relative_error,
    run_case,
)
from benchmarks.gpu_check.parts import PART, PARTS, Part, profile
from benchmarks.gpu_check.plan import (
    BOUNDS,
    BUDGETS,
    KERNELS,
    OUT_OF_TIME,
    QUICK_BUDGETS,
    QUICK_CALL,
    QUICK_LIMIT,
    QUICK_OUTSIDE,
    QUICK_PARTS,
    REPO,
    SAMPLE,
    number,
    settings,
)
from benchmarks.gpu_check.report import SECTIONS, TARGETS, failed, summary, target_part, targets, versions, write
from benchmarks.gpu_check.run import Check, main, parse_args

MODULES = (plan, numerics, layers, modes, fairseq_runs, parts, report, run)


class _Package(types.ModuleType):
    """A name set on benchmarks.gpu_check (a test's monkeypatch of reference_cases, say) is set in the modules that
    hold the same object too, so that the parts' code sees it."""

    def __setattr__(self, name, value):
        current = vars(self).get(name)
        if current is not None and not isinstance(current, types.ModuleType):
            for module in MODULES:
                if vars(module).get(name) is current:
                    setattr(module, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
