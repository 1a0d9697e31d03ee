"""The GPU check's plan: what each part runs (settings), the parts' time budgets and those of the quick profile, and
what the parts share (the repository, the words of a skipped row, how a number is printed)."""

import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO, "data", "sample")
# seconds per part on an H100 / H200, from the H200 runs of docs/results.md ("How fast on a GPU?"; with the Triton
# kernel's first compiles, correctness needs about 120 s, a speed table about 100 s,
# a paper config 30 s, or 65 s for EVA's first, which compiles).
# modes: not yet run on a GPU; 200 s is a guess of torch.compile's first compiles (about 20 s each) for 8 rows.
BUDGETS = {"correctness": 130, "speed_tokens": 110, "speed_batch1": 45, "modes": 200, "paper_configs": 280,
           "clean_exit": 100, "profile": 60}
# The quick profile (--quick): what must be known of a change, in one job of at most 8 minutes on an H100 or H200
# (QUICK_CALL, set-up and start-up included). Seconds from the same H200 records, in benchmarks/results/gpu/:
# correctness: the Triton kernel's rows took 66 s for 25 of its 26 (correctness_triton, all five precisions, its
#   first compiles included); the quick profile runs 14 of those rows (float32, bfloat16), without float16's compiles;
# paper_configs: the six runs took 65 + 28 (wikitext103 EVA, softmax), 64 + 31 (wmt14), 33 + 28 (mlm) = 249 s
#   (triton_check), and the binarising (about 22 s there) runs beside correctness;
# modes: an estimate, the part has not run on a GPU: the eager rows about 40 s (the Triton kernel's first compiles
#   of the four EVA layers, about what the first speed table's first shape took), then torch.compile's first
#   compiles, guessed at 20 s a row: the 1 x 1024 rows of EVA and causal EVA in each mode (the batch-1 target's),
#   then what fits. It runs last, so that running over its estimate costs its own rows alone.
QUICK_PARTS = ("correctness", "paper_configs", "modes")
QUICK_BUDGETS = {"correctness": 60, "paper_configs": 270, "modes": 80}
QUICK_CALL = 480  # seconds: the job the quick profile fits
# the rest of the job (estimates): benchmarks/gpu_check_quick.sh's set-up (a venv on the machine's torch, fairseq's
# wheels), the check's start-up (imports, CUDA), and a row still running at its part's deadline (a compile)
QUICK_OUTSIDE = {"set-up": 30, "start-up": 15, "a row past its deadline": 25}
QUICK_LIMIT = QUICK_CALL - QUICK_OUTSIDE["set-up"]  # gpu_check_quick.sh stops the check after this many seconds
KERNELS = ("triton", "fused", "blockwise")  # the kernels that run on CUDA, the new one first
OUT_OF_TIME = "skipped: the part's time budget ran out"
# relative error bounds per precision (outputs and gradients)
BOUNDS = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2, "autocast-float16": 1e-2, "autocast-bfloat16": 5e-2}


def settings(smoke, quick=False):
    """What each part runs: the GPU check, or the same code at tiny sizes on the CPU (--smoke); --quick: the
    Triton kernel alone in float32 and bfloat16, and the modes rows in the order that answers the batch-1 target
    first (the rest of a part as the full check runs it)."""
    if smoke:
        s = dict(device="cpu", kernels=KERNELS, precisions=("float32", "autocast-bfloat16"), draws=100, dtype="float32",
                 tokens=512, token_lengths=[256, 512], batch1_lengths=[128, 256], profile_shape=(256, 2),
                 mode_shapes=[(256, 2)], modes=("none", "default"), mode_order="mode", repeats=1, min_time=0.0,
                 updates=3, log_interval=1, exit_updates=3, run_timeout=300, train=["--cpu"],
                 hydra=["common.cpu=true", "common.fp16=false"])
    else:
        s = dict(device="cuda", kernels=KERNELS, precisions=tuple(BOUNDS), draws=400, dtype="bfloat16", tokens=65536,
                 token_lengths=[1024, 2048, 4096, 8192, 16384, 32768],
                 batch1_lengths=[1024, 2048, 4096, 8192, 16384, 32768], profile_shape=(8192, 8),
                 mode_shapes=[(8192, 8), (1024, 1)], modes=("none", "reduce-overhead", "default"), mode_order="mode",
                 repeats=5, min_time=0.05, updates=60, log_interval=10, exit_updates=200,
                 run_timeout=75, train=["--fp16"], hydra=[])
    if quick:
        s.update(kernels=("triton",), precisions=("float32", "bfloat16"), mode_order="layer",
                 mode_shapes=sorted(s["mode_shapes"], key=lambda shape: shape[1]))  # batch 1 first
    return s



def number(x, fmt):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)

