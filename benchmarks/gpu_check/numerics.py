"""The correctness part: EVA on CUDA against the same module in float64 on the CPU, for each kernel, precision,
direction and mode; incremental decoding; attention dropout."""

import contextlib
import copy
import math
import time
import traceback

import torch

from benchmarks.gpu_check.plan import BOUNDS, KERNELS, OUT_OF_TIME, number
from fairseq_eva.attention import EVAAttention

CASES = {
    "bidirectional": dict(window_size=16, num_chunks=8, overlap=True),
    "causal": dict(causal=True, window_size=16, chunk_size=4),
}


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



def run(check, deadline):
    """The part: each row into the result as it is measured; "failed rows" where a row failed."""
    rows, emit = [], check.table("correctness")

    def add(row):
        rows.append(row)
        emit(rows)

    correctness(check.device, check.settings["precisions"], check.settings["draws"], kernels=check.settings["kernels"],
                deadline=deadline, emit=add)
    return "ok" if all(r["status"] != "FAIL" for r in rows) else "failed rows"


def summary(result):
    """The part's section of gpu_check.md."""
    lines = []
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
    return lines
