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

import argparse
import concurrent.futures
import contextlib
import copy
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
import traceback

import torch

from benchmarks import baselines, common, speed
from fairseq_eva.attention import EVAAttention

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "sample")
PARTS = ("correctness", "speed_tokens", "speed_batch1", "modes", "paper_configs", "clean_exit", "profile")
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
CASES = {
    "bidirectional": dict(window_size=16, num_chunks=8, overlap=True),
    "causal": dict(causal=True, window_size=16, chunk_size=4),
}
# the speed tables' layers: d_model, heads; bidirectional EVA abs(E) and C; causal EVA window and chunk size
D_MODEL, HEADS, WINDOW, CHUNKS, CAUSAL_WINDOW, CHUNK_SIZE = 512, 8, 256, 128, 128, 8
LAYERS = {
    "sdpa": lambda kernel: baselines.MECHANISMS["sdpa"][0](D_MODEL, HEADS),
    "eva": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, kernel=kernel),
    "eva+rpe+dropout": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, use_rpe=True, dropout=0.1, kernel=kernel),
    "sdpa-causal": lambda kernel: baselines.MECHANISMS["sdpa-causal"][0](D_MODEL, HEADS),
    "eva-causal": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, kernel=kernel),
    "eva-causal+rpe+dropout": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, use_rpe=True,
                                                                  dropout=0.1, kernel=kernel),
}
# the profile's layers: the speed tables' EVA layers, and the bias and dropout apart, to tell their costs apart
PROFILE_LAYERS = {
    **{name: build for name, build in LAYERS.items() if name.startswith("eva")},
    "eva+rpe": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, use_rpe=True, kernel=kernel),
    "eva+dropout": lambda kernel: baselines.eva(D_MODEL, HEADS, WINDOW, CHUNKS, dropout=0.1, kernel=kernel),
    "eva-causal+rpe": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, use_rpe=True, kernel=kernel),
    "eva-causal+dropout": lambda kernel: baselines.eva_causal(D_MODEL, HEADS, CAUSAL_WINDOW, CHUNK_SIZE, dropout=0.1,
                                                              kernel=kernel),
}
# the layer as users run it: eager, and under each --eva-compile mode, beside the SDPA layers (eager, as fairseq runs them)
MODE_LAYERS = ("sdpa", "eva", "eva+rpe+dropout", "sdpa-causal", "eva-causal", "eva-causal+rpe+dropout")
# the speed tables' numbers before the layer's host work was cut (eager), which the modes table sets beside its own
BEFORE = [os.path.join("benchmarks", "results", "gpu", "triton_check", name) for name in
          ("correctness_speed_tokens.json", "speed_batch1_paper_configs_clean_exit.json")]
# (config, data, EVA's softmax twin); the language models' adaptive input and softmax cutoffs are set for
# the sample's 8000 words
PAPER_CONFIGS = [("wikitext103_eva_16l", "lm", "wikitext103_softmax_16l"), ("wmt14_en_de_eva16", "mt", "wmt14_en_de_softmax"),
                 ("mlm_eva_4096", "lm", "mlm_softmax_4096")]
# the speed targets the table checks: (quantity, mechanism, baseline, N, bound, "min" or "max")
TARGETS = [
    ("speed-up", "eva", "sdpa", 8192, 5.0, "min"), ("speed-up", "eva", "sdpa", 32768, 15.0, "min"),
    ("speed-up", "eva-causal", "sdpa-causal", 8192, 2.0, "min"), ("speed-up", "eva-causal", "sdpa-causal", 32768, 3.0, "min"),
    *[("time ratio", m + "+rpe+dropout", m, N, 1.1, "max") for m in ("eva", "eva-causal") for N in (8192, 32768)],
    *[("memory ratio", m, base, N, 1.2, "max") for m, base in (("eva", "sdpa"), ("eva+rpe+dropout", "sdpa"),
                                                               ("eva-causal", "sdpa-causal"),
                                                               ("eva-causal+rpe+dropout", "sdpa-causal")) for N in (8192, 32768)],
    *[("time ratio, fastest mode, batch 1", m, base, 1024, 1.3, "max") for m, base in (("eva", "sdpa"),
                                                                                       ("eva-causal", "sdpa-causal"))],
    ("words/s ratio", "mlm_eva_4096", "mlm_softmax_4096", None, 1.5, "min"),
    ("words/s ratio", "wikitext103_eva_16l", "wikitext103_softmax_16l", None, 1.0, "min"),
    ("words/s ratio", "wmt14_en_de_eva16", "wmt14_en_de_softmax", None, 0.95, "min"),
]


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


def profile(quick):
    """(the parts in the order they run, each part's budget in seconds on an H100 or H200) of the full check or --quick."""
    return (QUICK_PARTS, QUICK_BUDGETS) if quick else (PARTS, BUDGETS)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--work", default=os.path.join(REPO, "work", "gpu_check"),
                        help="folder for the binarised sample, the fairseq logs and run folders (default: work/gpu_check)")
    parser.add_argument("--smoke", action="store_true", help="every part on the CPU at tiny sizes (the tests run this)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the quick profile, one job of {QUICK_CALL // 60} minutes: {', '.join(QUICK_PARTS)} "
                             "(the Triton kernel in float32 and bfloat16); with --smoke, on the CPU")
    parser.add_argument("--parts", nargs="+", choices=PARTS, help="the parts to run (default: all, or the quick profile's)")
    parser.add_argument("--budget", type=float,
                        help="seconds for the whole check; no part starts a row after it (default: the parts' budgets, "
                             f"{sum(BUDGETS.values())} s, or {sum(QUICK_BUDGETS.values())} s with --quick)")
    parser.add_argument("--speed-kernel", default="auto", help="the EVA kernel of the speed tables (default: auto)")
    parser.add_argument("--lengths", type=int, nargs="+", help="only these N in the speed tables (default: all)")
    parser.add_argument("--configs", nargs="+", choices=[c for pair in PAPER_CONFIGS for c in (pair[0], pair[2])],
                        help="the paper configs to train (default: all)")
    args = parser.parse_args(argv)
    parts, budgets = profile(args.quick)
    outside = [p for p in args.parts or () if p not in parts]
    if outside:
        parser.error(f"--quick runs {', '.join(parts)}; not {', '.join(outside)}")
    args.parts = [p for p in parts if p in (args.parts or parts)]  # the profile's order
    if args.budget is None:
        args.budget = float(sum(budgets[p] for p in args.parts))
    return args


# ------------------------------------------------------------------------------------------- correctness


def relative_error(a, ref):
    return ((a.double().cpu() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def run_case(module, x, mask, weights, device, dtype=None, autocast=None):
    """Output and gradients (input and parameters) of one forward + backward."""
    module.zero_grad(set_to_none=True)
    x = x.detach().to(device, dtype or x.dtype).requires_grad_()
    mask = None if mask is None else mask.to(device)
    with torch.autocast(torch.device(device).type, dtype=autocast, enabled=autocast is not None):
        y = module(x, key_padding_mask=mask)
    real = torch.ones_like(y[..., 0], dtype=torch.bool) if mask is None else ~mask
    (y.float() * weights.to(device)).masked_fill(~real[..., None], 0).sum().backward()
    grads = torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in module.parameters() if p.grad is not None])
    return y.masked_fill(~real[..., None], 0), grads


@contextlib.contextmanager
def pinned_noise():
    """Pins omega's training noise to 0: compare like with like."""
    real_randn_like = torch.randn_like
    torch.randn_like = lambda t, **kw: torch.zeros_like(t)
    try:
        yield real_randn_like
    finally:
        torch.randn_like = real_randn_like


def missing_kernel(name):
    """Why EVAAttention takes no kernel=name in this code (an older or newer layer), or None."""
    try:
        EVAAttention(8, 2, kernel=name)
    except ValueError as error:
        return str(error)
    return None


def refused(error):
    """A kernel's refusal of a call it does not take (a ValueError that names the kernel), not a failure."""
    return isinstance(error, ValueError) and "kernel" in str(error)


def interpreter_limit(kernel, device, precision):
    """Why a row cannot be checked here, or None: Triton's CPU interpreter (--smoke) computes bfloat16 wrongly
    (a tl.dot of bfloat16 tiles is off by 1e10 in Triton 3.9's), so the Triton kernel's bfloat16 is checked
    on a GPU only (as in tests/test_kernel_triton.py)."""
    if kernel == "triton" and torch.device(device).type == "cpu" and "bfloat16" in precision:
        return "Triton's CPU interpreter computes bfloat16 wrongly; checked on a GPU only"
    return None


def attempt(row, compute, device=None):
    """row with compute()'s (output error, gradient error, ok) filled in, or with why it could not run."""
    limit = None if device is None else interpreter_limit(row["kernel"], device, row["precision"])
    if limit is not None:
        return dict(row, output_error=float("nan"), gradient_error=float("nan"), status="n/a", note=limit)
    try:
        err_y, err_g, ok = compute()
    except Exception as error:  # the row says what happened; the other rows still run
        nan = float("nan")
        if refused(error):
            return dict(row, output_error=nan, gradient_error=nan, status="n/a", note=str(error).splitlines()[0][:300])
        return dict(row, output_error=nan, gradient_error=nan, status="FAIL", note=traceback.format_exc()[-1500:])
    return dict(row, output_error=err_y, gradient_error=err_g, status="ok" if ok else "FAIL")


def correctness(device, precisions, draws, kernels=KERNELS, deadline=math.inf, emit=lambda row: None):
    """Rows of the correctness table, each passed to emit() as soon as it is measured."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    references = reference_cases()
    for kernel in kernels:
        reason = missing_kernel(kernel)
        if reason is not None:
            emit(dict(kernel=kernel, check="kernel not available", precision="-", output_error=float("nan"),
                      gradient_error=float("nan"), bound=float("nan"), status="n/a", note=reason.splitlines()[0][:300]))
            continue
        checks = [*case_checks(references, kernel, device, precisions), *decoding_checks(kernel, device, precisions),
                  *dropout_checks(kernel, device, draws)]
        for check in checks:
            if time.monotonic() > deadline:
                emit(dict(kernel=kernel, check="the rest of this kernel's checks", precision="-", output_error=float("nan"),
                          gradient_error=float("nan"), bound=float("nan"), status="skipped", note=OUT_OF_TIME))
                break
            emit(check())


def reference_cases():
    """(name, side, mode, module, x, mask, weights, reference output, reference gradients): float64 on the CPU."""
    cases = []
    with pinned_noise() as real_randn_like:
        for name, options in CASES.items():
            torch.manual_seed(0)
            reference = EVAAttention(128, 4, use_rpe=True, **options).double()
            with torch.no_grad():
                for p in reference.parameters():
                    p.add_(0.1 * real_randn_like(p))
            B, N = 3, 300
            x = torch.randn(B, N, 128, dtype=torch.float64)
            lengths = torch.tensor([N, 211, 37])
            positions = torch.arange(N)[None, :]
            side = "right" if options.get("causal") else "left"  # fairseq's decoders right-pad, sources left-pad
            mask = positions >= lengths[:, None] if side == "right" else positions < N - lengths[:, None]
            weights = torch.randn(B, N, 128, dtype=torch.float64)
            for mode in ("train", "eval"):  # training: a trainable RPE; evaluation: a frozen one
                module = copy.deepcopy(reference).train(mode == "train")
                module.rpe.requires_grad_(mode == "train")
                ref_y, ref_g = run_case(module, x, mask, weights, "cpu")
                cases.append((name, side, mode, module, x, mask, weights, ref_y, ref_g))
    return cases


def case_checks(references, kernel, device, precisions):
    """One deferred check per (case, mode, precision): the kernel on `device` against the float64 reference."""
    for name, side, mode, reference, x, mask, weights, ref_y, ref_g in references:
        for precision in precisions:
            def check(precision=precision, name=name, side=side, mode=mode, reference=reference, x=x, mask=mask,
                      weights=weights, ref_y=ref_y, ref_g=ref_g):
                autocast = getattr(torch, precision.split("-")[1]) if precision.startswith("autocast") else None
                dtype = torch.float32 if autocast else getattr(torch, precision)
                bound = BOUNDS[precision]
                row = dict(kernel=kernel, check=f"{name}, {side} padding, {mode}", precision=precision, bound=bound)

                def compute():
                    module = copy.deepcopy(reference).to(device, dtype).train(mode == "train")
                    module.kernel = kernel
                    with pinned_noise():
                        y, g = run_case(module, x, mask, weights, device, dtype, autocast)
                    err_y, err_g = relative_error(y, ref_y), relative_error(g, ref_g)
                    return err_y, err_g, math.isfinite(err_y) and math.isfinite(err_g) and max(err_y, err_g) <= bound

                return attempt(row, compute, device)

            yield check


def decoding_checks(kernel, device, precisions):
    """Causal EVA fed one token at a time (the cache) equals the full forward (which runs the kernel)."""
    for precision in [p for p in ("float32", "bfloat16") if p in precisions]:
        def check(precision=precision):
            bound = BOUNDS[precision]
            row = dict(kernel=kernel, check="causal, incremental decoding = full forward", precision=precision, bound=bound)

            def compute():
                torch.manual_seed(1)
                module = EVAAttention(128, 4, use_rpe=True, kernel=kernel, **CASES["causal"])
                module = module.to(device, getattr(torch, precision)).eval()
                x = torch.randn(2, 77, 128, device=device, dtype=getattr(torch, precision))
                with torch.no_grad():
                    full = module(x)
                    cache = {}
                    steps = torch.cat([module(x[:, t : t + 1], cache=cache) for t in range(x.size(1))], dim=1)
                err = relative_error(steps, full.double().cpu())
                return err, float("nan"), err <= bound

            return attempt(row, compute, device)

        yield check


def dropout_checks(kernel, device, draws, p=0.1):
    """Attention dropout 0.1 with a trainable RPE, float32: the same seed gives the same output and gradients
    (up to rounding: a kernel may sum in another order each call; another mask moves the output by ~0.3),
    and the mean output over `draws` masks is the output without dropout, within three standard errors
    (relative error of the mean against that of one draw / sqrt(draws))."""
    for name, options in CASES.items():
        state = {}

        def setup(name=name, options=options):
            torch.manual_seed(2)
            module = EVAAttention(128, 4, use_rpe=True, dropout=p, kernel=kernel, **options).to(device).train()
            x = torch.randn(2, 300, 128, device=device, requires_grad=True)

            def run(seed):
                torch.manual_seed(seed)
                y = module(x)
                return y, torch.autograd.grad(y.square().sum(), [x, *module.parameters()])

            with pinned_noise():
                (y1, g1), (y2, g2) = run(0), run(0)
            state.update(module=module, x=x, y1=y1.detach())
            y_diff = relative_error(y1.detach(), y2.detach().double().cpu())
            g_diff = relative_error(torch.cat([g.flatten() for g in g1]), torch.cat([g.flatten() for g in g2]).double().cpu())
            return y_diff, g_diff, max(y_diff, g_diff) <= 1e-5

        def replay(name=name, setup=setup):
            return attempt(dict(kernel=kernel, check=f"{name}, dropout {p}: same seed, same output and gradients",
                                precision="float32", bound=1e-5), setup)

        def mean(name=name):
            row = dict(kernel=kernel, check=f"{name}, dropout {p}: mean of {draws} draws = no dropout", precision="float32",
                       bound=float("nan"))

            def compute():
                if not state:
                    raise ValueError(f"kernel {kernel!r}: the replay check before this one did not run")
                module, x = state["module"], state["x"]
                with torch.no_grad(), pinned_noise():
                    total = sum(module(x) for _ in range(draws)) / draws
                    module.dropout.p = 0.0
                    plain = module(x)
                    module.dropout.p = p
                err = relative_error(total, plain.double().cpu())
                dropped = relative_error(state["y1"], plain.double().cpu())  # one draw: far from it (the mask applies)
                row["bound"] = 3 * dropped / math.sqrt(draws)  # three standard errors of the mean
                row["check"] += f" (one draw: {dropped:.2f})"
                return err, float("nan"), err <= row["bound"] and dropped > 1e-2

            return attempt(row, compute, device)

        yield replay
        yield mean


# ------------------------------------------------------------------------------------------------- speed


def attention_flops(mechanism, batch, N, heads=HEADS, head_dim=D_MODEL // HEADS):
    """FLOPs of the attention alone, forward + backward (the count the targets use): per head 14 d N times the keys a
    query sees, N for softmax (N / 2 causal), abs(E) + C for EVA, about w / 2 + N / (2 s) for causal EVA."""
    if mechanism.startswith("sdpa"):
        keys = N / 2 if "causal" in mechanism else N
    elif "causal" in mechanism:
        keys = CAUSAL_WINDOW / 2 + N / (2 * CHUNK_SIZE)
    else:
        keys = WINDOW + CHUNKS
    return 14 * head_dim * N * keys * batch * heads


def auto_kernel(device, dtype, dropout, bias_grad):
    """The kernel that kernel="auto" picks for a training call, where the kernel registry says (else None)."""
    try:
        from fairseq_eva.attention import kernels

        q = torch.empty(1, HEADS, 64, D_MODEL // HEADS, device=device, dtype=dtype)
        return kernels.choose("auto", q, needs_grad=True, dropout=dropout, bias_grad=bias_grad).name
    except Exception:  # no registry, or none of its kernels takes the call
        return None


def measure_speed(N, batch, kernel, device, dtype, repeats, min_time):
    """Rows (benchmarks/speed.py's fields, plus batch, FLOPs, TFLOPS, or an error) of every layer at (N, batch)."""
    torch.manual_seed(0)
    H, d = HEADS, D_MODEL // HEADS
    x = torch.randn(batch, N, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)
    q, k, v = (torch.randn(batch, N, H, d, device=device, dtype=dtype).transpose(1, 2).requires_grad_() for _ in range(3))
    grad_heads = torch.randn(batch, N, H, d, device=device, dtype=dtype).transpose(1, 2)
    layers, rows = {}, []
    for name, build in LAYERS.items():
        try:
            layer = build(kernel).to(device, dtype).train()
            speed.layer_call(layer, x, grad)()  # runs, and compiles what it compiles, before the timing
            speed.attention_call(layer, q, k, v, grad_heads)()
            layers[name] = layer
        except Exception as error:  # one failing layer (out of memory, a refusal) does not cost the others
            rows.append(dict(N=N, batch=batch, mechanism=name, error=(str(error).splitlines() or [repr(error)])[0][:300]))
            layers.pop(name, None)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    timed = {**layers, "projections": baselines.ProjectedAttention(D_MODEL, H, lambda q, k, v: q + k + v).to(device, dtype)}
    clock = common.clock("wall")
    layer_times = common.time_interleaved({n: speed.layer_call(m, x, grad) for n, m in timed.items()}, device, repeats,
                                          min_time, 20.0, clock)
    attention_times = common.time_interleaved({n: speed.attention_call(m, q, k, v, grad_heads) for n, m in layers.items()},
                                              device, repeats, min_time, 20.0, clock)
    for name, layer in timed.items():
        row = dict(N=N, batch=batch, mechanism=name, layer_s=common.median(layer_times[name]), layer_samples=layer_times[name],
                   peak_bytes=common.peak_memory(speed.layer_call(layer, x, grad), device))
        if name in attention_times:
            row.update(attention_s=common.median(attention_times[name]), attention_samples=attention_times[name],
                       flops=attention_flops(name, batch, N))
            row["tflops"] = row["flops"] / row["attention_s"] / 1e12
        rows.append(row)
    return rows


def speed_part(shapes, kernel, device, dtype, repeats, min_time, deadline, emit):
    """Measures (N, batch) after (N, batch) while the budget lasts; emit(rows) after each."""
    rows = []
    for N, batch in shapes:
        if time.monotonic() > deadline:
            rows.append(dict(N=N, batch=batch, mechanism="all", error=OUT_OF_TIME))
            emit(rows)
            continue
        try:
            rows += measure_speed(N, batch, kernel, device, dtype, repeats, min_time)
        except Exception as error:  # out of memory while timing, say: the next shape still runs
            rows.append(dict(N=N, batch=batch, mechanism="all", error=(str(error).splitlines() or [repr(error)])[0][:300]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        emit(rows)
    return rows


def ratios(rows):
    """benchmarks/speed.py's speed-ups and memory ratios of the rows that were measured."""
    return speed.ratios([r for r in rows if "layer_s" in r])


def profile_part(N, batch, kernel, device, dtype, deadline, emit):
    """Rows of the profile: each layer of PROFILE_LAYERS at (N, batch), or why it has none."""
    torch.manual_seed(0)
    x = torch.randn(batch, N, D_MODEL, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)
    rows = []
    for name, build in PROFILE_LAYERS.items():
        row = dict(N=N, batch=batch, mechanism=name)
        if time.monotonic() > deadline:
            row["error"] = OUT_OF_TIME
        else:
            try:
                row.update(profile_layer(build(kernel).to(device, dtype).train(), x, grad, device))
            except Exception as error:  # one failing layer does not cost the others
                row["error"] = (str(error).splitlines() or [repr(error)])[0][:300]
        rows.append(row)
        emit(rows)
    return rows


def profile_layer(layer, x, grad, device, calls=3, top=6):
    """Milliseconds per forward + backward: wall (synchronised), host (the process's CPU time, all threads:
    launching and Python, which runs ahead of the GPU) and GPU (the kernels' time, torch.profiler); the
    costliest kernels, or host operators where there is no GPU."""
    call = speed.layer_call(layer, x, grad)
    for _ in range(2):  # compiles and warms the allocator
        call()
    common.synchronize(device)
    wall, host = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    host = time.process_time() - host
    common.synchronize(device)
    wall = time.perf_counter() - wall
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        call()
        common.synchronize(device)
    gpu, costliest = kernel_times(prof.events())
    if gpu is None:
        costliest = {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}
    costliest = sorted(costliest.items(), key=lambda kv: -kv[1])[:top]
    return dict(wall_ms=1e3 * wall / calls, host_ms=1e3 * host / calls, gpu_ms=gpu,
                bound=None if gpu is None else ("host" if 1e3 * host / calls >= gpu else "GPU"), costliest=costliest)


def kernel_times(events):
    """(total milliseconds of the GPU's kernels and copies, milliseconds by kernel name); (None, {}) with none.
    Only device-side events: an operator's own "device time" would count its kernels twice."""
    by_name = {}
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e3
    return (sum(by_name.values()), by_name) if by_name else (None, {})


def layer_flops(mechanism, batch, N):
    """FLOPs of the whole layer, forward + backward: the four D x D projections (2 D^2 a token each way, the
    backward twice the forward) and the attention."""
    return 24 * batch * N * D_MODEL * D_MODEL + attention_flops(mechanism, batch, N)


def recorded_times(paths):
    """(N, batch, layer) -> (fwd + bwd ms, commit) from earlier GPU checks' speed tables (gpu_check.json files)."""
    found = {}
    for path in paths:
        path = os.path.join(REPO, path)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            record = json.load(f)
        commit = record["versions"]["commit"]
        meta = os.path.join(os.path.dirname(path), "meta.json")
        if os.path.exists(meta):
            with open(meta) as f:
                commit = json.load(f)["commit"]
        for key in ("speed_tokens", "speed_batch1"):
            for r in record.get(key, {}).get("rows", []):
                if "layer_s" in r:
                    found[(r["N"], r["batch"], r["mechanism"])] = (1e3 * r["layer_s"], commit)
    return found


def mode_rows(shapes, modes, order="mode"):
    """(N, batch, layer, mode) in the order the part measures them: every layer eager first (cheap), then the
    compiled EVA layers (each first pass compiles): mode by mode, or with order="layer" (--quick, whose budget may
    end first) shape by shape, the plain layers before those with RPE + dropout, each in every mode."""
    eager = [(N, B, name, "none") for N, B in shapes for name in MODE_LAYERS]
    compiled_modes = [mode for mode in modes if mode != "none"]
    eva = [name for name in MODE_LAYERS if name.startswith("eva")]
    if order == "layer":
        eva.sort(key=lambda name: "+" in name)  # stable: eva, eva-causal, then their +rpe+dropout
        return eager + [(N, B, name, mode) for N, B in shapes for name in eva for mode in compiled_modes]
    return eager + [(N, B, name, mode) for mode in compiled_modes for N, B in shapes for name in eva]


def modes_part(shapes, modes, kernel, device, dtype, deadline, emit, before=(), order="mode"):
    """The layer as users run it: each row's time a call, host and GPU time, the whole layer's TFLOPS, the time of
    its first forward + backward (compiling, for a compiled mode), against the same layer eager, SDPA eager, and `before`."""
    recorded = recorded_times(before)
    rows, inputs = [], {}
    for N, batch, name, mode in mode_rows(shapes, modes, order):
        row = dict(N=N, batch=batch, mechanism=name, mode=mode)
        if time.monotonic() > deadline:
            row["error"] = OUT_OF_TIME
        else:
            if (N, batch) not in inputs:
                torch.manual_seed(0)
                x = torch.randn(batch, N, D_MODEL, device=device, dtype=dtype, requires_grad=True)
                inputs = {(N, batch): (x, torch.randn_like(x))}  # one shape's inputs at a time
            x, grad = inputs[(N, batch)]
            try:
                layer = LAYERS[name](kernel).to(device, dtype).train()
                if mode != "none":
                    layer.compile = mode  # EVAAttention(compile=mode), as --eva-compile builds it
                start = time.perf_counter()
                speed.layer_call(layer, x, grad)()
                common.synchronize(device)
                row["first_call_s"] = time.perf_counter() - start
                row.update(profile_layer(layer, x, grad, device, calls=10))
                row["tflops"] = layer_flops(name, batch, N) / (row["wall_ms"] / 1e3) / 1e12
            except Exception as error:  # one failing row (a compile error, out of memory) does not cost the others
                row["error"] = (str(error).splitlines() or [repr(error)])[0][:300]
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        if (N, batch, name) in recorded and mode == "none":
            row["before_ms"], row["before_commit"] = recorded[(N, batch, name)]
        rows.append(row)
        emit(rows)
    return rows


def mode_ratios(rows):
    """Each measured row's time against the same layer eager and against SDPA eager (its causal twin for causal)."""
    times = {(r["N"], r["batch"], r["mechanism"], r["mode"]): r["wall_ms"] for r in rows if "wall_ms" in r}
    out = []
    for (N, batch, name, mode), ms in times.items():
        if not name.startswith("eva"):
            continue
        sdpa = times.get((N, batch, "sdpa-causal" if "causal" in name else "sdpa", "none"))
        eager = times.get((N, batch, name, "none"))
        out.append(dict(N=N, batch=batch, mechanism=name, mode=mode, vs_sdpa=ms / sdpa if sdpa else None,
                        vs_eager=ms / eager if eager else None))
    return out


# ------------------------------------------------------------------------------------------------ fairseq


def fairseq_env():
    return {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONWARNINGS": "ignore"}


def run_tool(code, args, log, timeout):
    """Runs fairseq code with this Python (the same fairseq and torch), its output into `log`; returns
    (return code or None on a timeout, the output)."""
    with open(log, "w") as f:
        try:
            returncode = subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=f, stderr=subprocess.STDOUT,
                                        env=fairseq_env(), timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            returncode = None
    with open(log) as f:
        return returncode, f.read()


def cli(module, prog):
    return f"import sys; from fairseq_cli.{module} import cli_main; sys.argv[0] = '{prog}'; sys.exit(cli_main())"


def prepare_data(work):
    """The bundled sample binarised by fairseq-preprocess (8000 words) into WORK/data, once: mt (en-de, a joined
    dictionary) and lm."""
    mt, lm = os.path.join(work, "data", "mt-bin"), os.path.join(work, "data", "lm-bin")
    jobs = [(mt, "dict.en.txt", ["--source-lang", "en", "--target-lang", "de", "--trainpref", f"{SAMPLE}/po_en_de/train",
                                 "--validpref", f"{SAMPLE}/po_en_de/valid", "--joined-dictionary"]),
            (lm, "dict.txt", ["--only-source", "--trainpref", f"{SAMPLE}/doc_en/train.txt", "--validpref",
                              f"{SAMPLE}/doc_en/valid.txt"])]
    for dest, marker, args in jobs:
        if os.path.exists(os.path.join(dest, marker)):
            continue
        log = os.path.join(work, "logs", f"preprocess_{os.path.basename(dest)}.log")
        code, text = run_tool(cli("preprocess", "fairseq-preprocess"), [*args, "--destdir", dest, "--nwordssrc", "8000",
                                                                        "--workers", "4"], log, 600)
        if code != 0:
            raise RuntimeError(f"fairseq-preprocess failed ({code}):\n{text[-3000:]}")
    return {"mt": mt, "lm": lm}


def train_row(name, returncode, text, seconds, timeout):
    """What a fairseq training log shows: losses, words/s (median of wps after the first logged interval)."""
    records = common.fairseq_json_records(text, "train_inner")
    losses = [r["loss"] for r in records]
    wps = [r["wps"] for r in records[1:]]
    nan = float("nan")
    return dict(run=name, returncode=returncode, timed_out=returncode is None, seconds=seconds,
                done="done training" in text, aborted="terminate called" in text, intervals=len(records),
                first_loss=losses[0] if losses else nan, last_loss=losses[-1] if losses else nan,
                words_per_second=sorted(wps)[len(wps) // 2] if wps else nan, wps=wps,
                error=None if returncode == 0 else (f"timed out after {timeout:.0f} s" if returncode is None else text[-2000:]))


def hydra_overrides(config, data, save, s):
    """The config as users run it, on the sample: few updates, no checkpoints, no validation, the data
    loaded in the training process, update_freq 1 (words/s is per token; the configs' update_freq is for
    their 8-GPU batch); --smoke: on the CPU, tiny models and short sequences."""
    over = [f"task.data={data}", f"common.user_dir={REPO}/fairseq_eva", f"checkpoint.save_dir={save}",
            f"optimization.max_update={s['updates']}", f"common.log_interval={s['log_interval']}", "checkpoint.no_save=true",
            "dataset.disable_validation=true", "dataset.num_workers=0", "optimization.update_freq=[1]", *s["hydra"]]
    if config.startswith("wikitext103"):
        over += ["+model.adaptive_input_cutoff='2000,5000'", "+model.adaptive_softmax_cutoff='2000,5000'"]
    if s["device"] == "cpu":
        if config.startswith("wmt14"):
            over += ["+model.encoder_layers=1", "+model.decoder_layers=1", "+model.encoder_embed_dim=32",
                     "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64", "+model.decoder_ffn_embed_dim=64",
                     "+model.encoder_attention_heads=2", "+model.decoder_attention_heads=2"]
        elif config.startswith("wikitext103"):
            over += ["+model.decoder_layers=1", "+model.decoder_embed_dim=32", "+model.decoder_input_dim=32",
                     "+model.decoder_output_dim=32", "+model.decoder_ffn_embed_dim=64", "+model.decoder_attention_heads=2",
                     "dataset.max_tokens=1024"]
        else:
            over += ["+model.encoder_layers=1", "+model.encoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
                     "+model.encoder_attention_heads=2", "task.tokens_per_sample=512", "model.max_positions=512",
                     "dataset.batch_size=2"]
    return over


def paper_configs(s, data, work, deadline, emit, configs=None):
    rows = []
    for config in [name for eva, _, softmax in PAPER_CONFIGS for name in (eva, softmax) if name in (configs or [name])]:
        kind = next(k for eva, k, softmax in PAPER_CONFIGS if config in (eva, softmax))
        left = deadline - time.monotonic()
        if left < 15:
            rows.append(dict(run=config, error=OUT_OF_TIME))
            emit(rows)
            continue
        save = os.path.join(work, "runs", config)
        timeout = min(s["run_timeout"], left)
        start = time.monotonic()
        args = ["--config-dir", os.path.join(REPO, "configs"), "--config-name", config,
                *hydra_overrides(config, data[kind], save, s)]
        log = os.path.join(work, "logs", config + ".log")
        code, text = run_tool(cli("hydra_train", "fairseq-hydra-train"), args, log, timeout)
        rows.append(train_row(config, code, text, time.monotonic() - start, timeout))
        emit(rows)
    return rows


# the control of the clean-exit check: fairseq-train with the atexit hook of fairseq_eva/fairseq_fixes/clean_exit.py removed (the
# plugin imported after fairseq_cli.train, which sets up the logging, and before cli_main, which would register it)
WITHOUT_FIX = ("import atexit, sys; from fairseq_cli.train import cli_main; from fairseq_eva.fairseq_fixes import clean_exit; "
               "atexit.unregister(clean_exit.stop_background_loaders); sys.argv[0] = 'fairseq-train'; sys.exit(cli_main())")


def clean_exit_check(s, data, work, deadline, emit):
    """The tiny EVA translation model, fairseq-train, as the check ran it when it aborted at exit: 200 updates
    of 33-batch epochs end 2 batches into the 7th, with fairseq's prefetching thread busy."""
    args = [data["mt"], "--arch", "transformer_eva_tiny", "--max-tokens", "4096", "--share-all-embeddings",
            "--user-dir", os.path.join(REPO, "fairseq_eva"), *s["train"], "--optimizer", "adam", "--lr", "5e-4",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50", "--max-update", s["exit_updates"], "--no-save",
            "--log-format", "json", "--log-interval", max(1, s["exit_updates"] // 20), "--seed", "1", "--disable-validation",
            "--num-workers", "0"]
    rows = []
    for name, code in (("translation, EVA encoder", cli("train", "fairseq-train")),
                       ("the same, clean_exit switched off (control)", WITHOUT_FIX)):
        left = deadline - time.monotonic()
        if left < 15:
            rows.append(dict(run=name, error=OUT_OF_TIME))
            emit(rows)
            continue
        start = time.monotonic()
        log = os.path.join(work, "logs", re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".log")
        returncode, text = run_tool(code, args, log, min(s["run_timeout"], left))
        rows.append(train_row(name, returncode, text, time.monotonic() - start, min(s["run_timeout"], left)))
        emit(rows)
    return rows


# ------------------------------------------------------------------------------------------------ report


def versions():
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return dict(torch=torch.__version__, triton=triton_version, python=platform.python_version(),
                commit=common.commit())


def targets(result):
    """The speed targets, from the 65,536-token table and the paper configs: value, bound, met."""
    found = {(s["mechanism"], s["baseline"], s["N"]): s for s in result.get("speed_tokens", {}).get("ratios", [])}
    wps = {r["run"]: r.get("words_per_second", float("nan")) for r in result.get("paper_configs", {}).get("rows", [])}
    out = []
    for quantity, mech, base, N, bound, kind in TARGETS:
        if quantity == "words/s ratio":
            value = wps.get(mech, float("nan")) / wps.get(base, float("nan"))
        elif quantity.startswith("time ratio, fastest mode"):
            found_modes = [r["vs_sdpa"] for r in result.get("modes", {}).get("ratios", [])
                           if (r["mechanism"], r["N"], r["batch"]) == (mech, N, 1) and r["vs_sdpa"]]
            value = min(found_modes, default=None)
        else:
            s = found.get((mech, base, N), {})
            value = {"speed-up": s.get("layer_speedup"), "memory ratio": s.get("memory_ratio"),
                     "time ratio": 1 / s["layer_speedup"] if s.get("layer_speedup") else None}[quantity]
        value = float("nan") if value is None else value
        met = (value >= bound if kind == "min" else value <= bound) if math.isfinite(value) else None
        out.append(dict(quantity=quantity, mechanism=mech, baseline=base, N=N, value=value, bound=bound, kind=kind, met=met))
    return out


def target_part(quantity):
    """The part whose table a speed target reads."""
    return {"words/s ratio": "paper_configs", "time ratio, fastest mode, batch 1": "modes"}.get(quantity, "speed_tokens")


def number(x, fmt):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def summary(result):
    v = result["versions"]
    chosen = result.get("plan", {})
    kind = "the quick profile (--quick)" if chosen.get("profile") == "quick" else "the full check"
    lines = [f"# GPU check on {result['device']}", "",
             f"torch {v['torch']}, Triton {v['triton']}, Python {v['python']}, commit {v['commit']}; {kind}"
             f"{', --smoke (the CPU, tiny sizes)' if result['smoke'] else ''}; {result['date']}", ""]
    if chosen.get("budgets"):
        lines += [f"Budgets on an H100 or H200: {' + '.join(f'{p} {b:.0f}' for p, b in chosen['budgets'].items())} s; "
                  f"the whole check {chosen['budget']:.0f} s" + (" (not applied on the CPU)." if result["smoke"] else "."), ""]
    lines += ["| part | seconds | budget | status |", "|---|---|---|---|"]
    for part, info in result["parts"].items():
        lines.append(f"| {part} | {info['seconds']:.0f} | {number(info['budget'], '.0f')} | {info['status']} |")
    lines.append("")
    rows = result.get("correctness", {}).get("rows", [])
    if rows:
        counts = {k: sum(r["status"] == k for r in rows) for k in ("ok", "FAIL", "n/a", "skipped")}
        lines += ["## Correctness against the float64 CPU reference", "", ", ".join(f"{n} {k}" for k, n in counts.items()), "",
                  "| kernel | check | precision | output error | gradient error | bound | status |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['kernel']} | {r['check']} | {r['precision']} | {number(r['output_error'], '.2e')} | "
                         f"{number(r['gradient_error'], '.2e')} | {number(r['bound'], '.0e')} | {r['status']} |")
        for r in rows:  # a failure's traceback each; the other notes once per kernel
            if r["status"] == "FAIL" and r.get("note"):
                lines.append(f"\n{r['kernel']}, {r['check']}, {r['precision']} FAILED:\n{r['note']}")
        for kernel, note in dict.fromkeys((r["kernel"], r["note"]) for r in rows if r["status"] != "FAIL" and r.get("note")):
            lines.append(f"\n{kernel}: {note}")
        lines.append("")
    for key, title in (("speed_tokens", f"{result['settings']['tokens']} tokens a call"), ("speed_batch1", "batch 1")):
        part = result.get(key)
        if not part:
            continue
        picks = ", ".join(f"{layer}: {name}" for layer, name in result["auto_kernel"].items() if name)
        kernel = part["kernel"] + (f" ({picks})" if part["kernel"] == "auto" and picks else "")
        lines += [f"## One layer, forward + backward, {result['settings']['dtype']}, {title} (EVA kernel: {kernel})", "",
                  "| N | batch | layer | fwd+bwd ms | attention ms | attention TFLOPS | peak MiB |",
                  "|---|---|---|---|---|---|---|"]
        for r in part["rows"]:
            if "error" in r:
                lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['error']} | | | |")
                continue
            attention_ms = 1e3 * r["attention_s"] if "attention_s" in r else None
            lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {1e3 * r['layer_s']:.2f} | "
                         f"{number(attention_ms, '.2f')} | {number(r.get('tflops'), '.3g')} | {r['peak_bytes'] / 2**20:.0f} |")
        lines += ["", "| N | layer vs baseline | speed-up | memory ratio |", "|---|---|---|---|"]
        for s in part["ratios"]:
            lines.append(f"| {s['N']} | {s['mechanism']} vs {s['baseline']} | {s['layer_speedup']:.2f}x | "
                         f"{number(s.get('memory_ratio'), '.2f')} |")
        lines.append("")
    part = result.get("modes")
    if part:
        lines += [f"## The layer as users run it: eager and compiled (--eva-compile), forward + backward, "
                  f"{result['settings']['dtype']}", "",
                  "ms a call: wall clock, synchronised; host ms: the process's CPU time a call; GPU ms: its kernels' time "
                  "(torch.profiler); TFLOPS: the whole layer's FLOPs (projections and attention) over its time; first pass: "
                  "compiling included; before: the same layer eager in an earlier check, at its commit.", "",
                  "| N | batch | layer | mode | ms a call | host ms | GPU ms | TFLOPS | first pass s | vs eager | vs SDPA | "
                  "before ms |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        found = {(r["N"], r["batch"], r["mechanism"], r["mode"]): r for r in part["ratios"]}
        for r in part["rows"]:
            before = f"{r['before_ms']:.2f} ({r['before_commit']})" if "before_ms" in r else "-"
            if "error" in r:
                lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['mode']} | {r['error']} | | | | | | | "
                             f"{before} |")
                continue
            x = found.get((r["N"], r["batch"], r["mechanism"], r["mode"]), {})
            lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['mode']} | {r['wall_ms']:.2f} | "
                         f"{r['host_ms']:.2f} | {number(r['gpu_ms'], '.2f')} | {r['tflops']:.3g} | {r['first_call_s']:.1f} | "
                         f"{number(x.get('vs_eager'), '.2f')} | {number(x.get('vs_sdpa'), '.2f')} | {before} |")
        lines.append("")
    part = result.get("profile")
    if part:
        lines += [f"## Where a layer's time goes (forward + backward, {result['settings']['dtype']})", "",
                  "host: the process's CPU time a call (launching, Python); GPU: its kernels' time (torch.profiler). "
                  "The larger bounds the time a call.", "",
                  "| N | batch | layer | ms a call | host ms | GPU ms | bound by | costliest (ms) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in part["rows"]:
            if "error" in r:
                lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['error']} | | | | |")
                continue
            costliest = "; ".join(f"{name[:50]} {ms:.2f}" for name, ms in r["costliest"])
            lines.append(f"| {r['N']} | {r['batch']} | {r['mechanism']} | {r['wall_ms']:.2f} | {r['host_ms']:.2f} | "
                         f"{number(r['gpu_ms'], '.2f')} | {r['bound'] or '-'} | {costliest} |")
        lines.append("")
    for key, title in (("paper_configs", "fairseq-hydra-train, the paper's configs on the sample"),
                       ("clean_exit", "Clean exit: fairseq-train of the tiny EVA translation model")):
        part = result.get(key)
        if not part:
            continue
        lines += [f"## {title}", "", "| run | exit code | done training | aborted | updates logged | first loss | last loss | "
                  "words/s | seconds |", "|---|---|---|---|---|---|---|---|---|"]
        for r in part["rows"]:
            if "returncode" not in r:
                lines.append(f"| {r['run']} | {r['error']} | | | | | | | |")
                continue
            code = "timed out" if r["timed_out"] else r["returncode"]
            lines.append(f"| {r['run']} | {code} | {'yes' if r['done'] else 'no'} | {'yes' if r['aborted'] else 'no'} | "
                         f"{r['intervals']} | {number(r['first_loss'], '.2f')} | {number(r['last_loss'], '.2f')} | "
                         f"{number(r['words_per_second'], '.0f')} | {r['seconds']:.0f} |")
        lines.append("")
    shown = [t for t in targets(result) if target_part(t["quantity"]) in result["parts"] or not result["parts"]]
    if shown:  # the targets whose tables ran (--parts, --quick)
        lines += ["## Speed targets", "", "| measure | N | value | target | met |", "|---|---|---|---|---|"]
    for t in shown:
        met = "-" if t["met"] is None else ("yes" if t["met"] else "no")
        lines.append(f"| {t['quantity']}: {t['mechanism']} vs {t['baseline']} | {t['N'] or ''} | {number(t['value'], '.2f')} | "
                     f"{'>=' if t['kind'] == 'min' else '<='} {t['bound']} | {met} |")
    for part, info in result["parts"].items():
        if info.get("error"):
            lines.append(f"\n{part} FAILED:\n{info['error']}")
    return "\n".join(lines) + "\n"


def write(result, out):
    result["targets"] = targets(result)
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write(summary(result))


def failed(result):
    """Whether something is wrong (not merely unavailable, skipped or slow): a failed part or row, a run
    that did not exit 0 or logged a non-finite loss (the control of the clean-exit check aside)."""
    parts = any(info["status"] == "failed" for info in result["parts"].values())
    rows = any(r["status"] == "FAIL" for r in result.get("correctness", {}).get("rows", []))
    runs = [r for key in ("paper_configs", "clean_exit") for r in result.get(key, {}).get("rows", [])
            if "returncode" in r and "control" not in r["run"]]
    return parts or rows or any(r["returncode"] != 0 for r in runs)


def main(argv=None):
    args = parse_args(argv)
    s = settings(args.smoke, args.quick)
    _, budgets = profile(args.quick)
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device is visible to torch (torch.cuda.is_available() is False); "
                 "--smoke runs every part on the CPU at tiny sizes")
    started = time.monotonic()
    out = os.path.abspath(args.out)
    work = os.path.abspath(args.work)
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    device, dtype = torch.device(s["device"]), getattr(torch, s["dtype"])
    machine = common.machine(device)
    result = dict(device=machine["gpu"] if device.type == "cuda" else machine["cpu"],
                  versions=versions(), smoke=args.smoke, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  plan=dict(profile="quick" if args.quick else "full", parts=list(args.parts),
                               budgets={p: budgets[p] for p in args.parts}, budget=args.budget),
                  settings={k: v for k, v in s.items() if k not in ("train", "hydra")}, parts={},
                  auto_kernel={"eva": auto_kernel(device, dtype, 0.0, False),
                               "eva+rpe+dropout": auto_kernel(device, dtype, 0.1, True)})
    data = {}
    binarising = None
    if args.parts[0] == "correctness" and {"paper_configs", "clean_exit"} & set(args.parts):
        # the sample is binarised (fairseq-preprocess, CPU) while correctness runs, which times nothing
        binarising = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="binarise").submit(prepare_data, work)

    def run_correctness(deadline):
        rows = result.setdefault("correctness", {"rows": []})["rows"]

        def emit(row):
            rows.append(row)
            write(result, out)

        correctness(device, s["precisions"], s["draws"], kernels=s["kernels"], deadline=deadline, emit=emit)
        return "ok" if all(r["status"] != "FAIL" for r in rows) else "failed rows"

    def run_speed(key, shapes):
        def run(deadline):
            part = result[key] = {"kernel": args.speed_kernel, "rows": [], "ratios": []}

            def emit(rows):
                part.update(rows=rows, ratios=ratios(rows))
                write(result, out)

            speed_part(shapes, args.speed_kernel, device, dtype, s["repeats"], s["min_time"], deadline, emit)
            return "ok"

        return run

    def run_fairseq(key, check):
        def run(deadline):
            part = result[key] = {"rows": []}
            if not data:
                data.update(prepare_data(work) if binarising is None else binarising.result())

            def emit(rows):
                part["rows"] = rows
                write(result, out)

            check(s, data, work, deadline, emit)
            return "ok"

        return run

    def run_profile(deadline):
        part = result["profile"] = {"kernel": args.speed_kernel, "rows": []}

        def emit(rows):
            part["rows"] = rows
            write(result, out)

        N, batch = s["profile_shape"]
        profile_part(N, batch, args.speed_kernel, device, dtype, deadline, emit)
        return "ok"

    def run_modes(deadline):
        part = result["modes"] = {"kernel": args.speed_kernel, "rows": [], "ratios": []}

        def emit(rows):
            part.update(rows=rows, ratios=mode_ratios(rows))
            write(result, out)

        modes_part(s["mode_shapes"], s["modes"], args.speed_kernel, device, dtype, deadline, emit, before=BEFORE,
                   order=s["mode_order"])
        return "ok"

    def lengths(default):
        return [N for N in default if N in args.lengths] if args.lengths else default

    steps = {"correctness": run_correctness,
             "speed_tokens": run_speed("speed_tokens", [(N, s["tokens"] // N) for N in lengths(s["token_lengths"])]),
             "speed_batch1": run_speed("speed_batch1", [(N, 1) for N in lengths(s["batch1_lengths"])]),
             "modes": run_modes,
             "paper_configs": run_fairseq("paper_configs", lambda *a: paper_configs(*a, configs=args.configs)),
             "clean_exit": run_fairseq("clean_exit", clean_exit_check),
             "profile": run_profile}
    for name in args.parts:
        start = time.monotonic()
        # --smoke has no budgets: a loaded CPU is slow, and the tests check the budgets on their own
        deadline = math.inf if args.smoke else min(start + budgets[name], started + args.budget)
        info = result["parts"][name] = dict(budget=deadline - start, seconds=0.0, status="running")
        try:
            if binarising is not None and name != "correctness":
                binarising.exception()  # the next parts time the GPU, or need the data: the binarising ends first
            info["status"] = steps[name](deadline)
        except Exception:  # one failing part must not hide the others' results
            info.update(status="failed", error=traceback.format_exc()[-3000:])
        info["seconds"] = time.monotonic() - start
        if info["seconds"] > info["budget"]:
            info["status"] += ", over budget"
        print(f"[gpu_check] {name}: {info['seconds']:.0f} s of {number(info['budget'], '.0f')} ({info['status']}); "
              f"{time.monotonic() - started:.0f} s in all", flush=True)
        write(result, out)
    print(summary(result))
    return 1 if failed(result) else 0


if __name__ == "__main__":
    sys.exit(main())
