"""The GPU check: is EVA right and fast on CUDA, in the settings people train with? One command, one table.

    make gpu-check                       # or: python -m benchmarks.gpu_check --out benchmarks/results/gpu
    python -m benchmarks.gpu_check --quick   # smaller sizes, for a first look

1. Correctness on CUDA against the same module in float64 on the CPU (whose kernels the test suite checks
   against the per-query definition): float32, bfloat16, float16 weights and autocast; bidirectional and
   causal; left / right padding; training with a trainable RPE (the fused kernels, then the blockwise one
   forced) and evaluation; relative error ||a - ref|| / ||ref|| of the output and of all gradients. Then
   incremental decoding against the full forward, and attention dropout 0.1: the same seed replays the
   same masks, and the mean over many masks is the output without dropout.
2. Speed and memory of one layer, forward + backward, bfloat16, against SDPA (flash), N = 1024 ... 32768
   at batch 1 and N = 4096, 16384 at batch 4, the paper's settings with trainable RPE and attention dropout
   0.1 beside the same layer without them (benchmarks/speed.py on CUDA).
3. fairseq-train --fp16 for 200 updates of the tiny translation and language models, EVA and softmax, on
   the bundled sample: finite losses and training words per second.
Writes gpu_check.json, gpu_check.md, speed.json / speed.png, speed_batch4.json and the fairseq logs under --out;
prints the summary last.
"""

import argparse
import contextlib
import copy
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback

import torch

from benchmarks import common, speed
from fairseq_eva.attention import EVAAttention

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "sample")
# relative error bounds per precision (outputs and gradients)
BOUNDS = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2, "autocast-float16": 1e-2, "autocast-bfloat16": 5e-2}
BATCH = 4  # the second speed table: batch 4 at N = 4096 and 16384 (more tokens a call, as in training)
CASES = {
    "bidirectional": dict(window_size=16, num_chunks=8, overlap=True),
    "causal": dict(causal=True, window_size=16, chunk_size=4),
}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu", help="folder for the JSON, plot and logs")
    parser.add_argument("--data", default=None, help="folder for the binarised sample (default: OUT/data)")
    parser.add_argument("--quick", action="store_true", help="N up to 8192 and 50 updates")
    parser.add_argument("--skip", nargs="*", default=[], choices=["correctness", "speed", f"speed_batch{BATCH}", "fairseq"])
    return parser.parse_args(argv)


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


def correctness(device, precisions=tuple(BOUNDS)):
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
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
            # training: a trainable RPE (on CUDA the fused kernels, on the CPU the blockwise one; and the
            # blockwise one forced); evaluation: a frozen RPE (fused)
            for mode, kernel in (("train", "auto"), ("train", "blockwise"), ("eval", "auto")):
                reference.train(mode == "train").rpe.requires_grad_(mode == "train")
                ref_y, ref_g = run_case(reference, x, mask, weights, "cpu")
                for precision in precisions if kernel == "auto" else [p for p in precisions if p in ("float32", "bfloat16")]:
                    autocast = getattr(torch, precision.split("-")[1]) if precision.startswith("autocast") else None
                    dtype = torch.float32 if autocast else getattr(torch, precision)
                    module = copy.deepcopy(reference).to(device, dtype).train(mode == "train")
                    module.kernel = kernel
                    check = f"{name}, {side} padding, {mode}" + (", blockwise kernel" if kernel == "blockwise" else "")
                    row = dict(check=check, precision=precision, bound=BOUNDS[precision])
                    try:
                        y, g = run_case(module, x, mask, weights, device, dtype, autocast)
                    except Exception:  # report it in the row, and go on with the other cases
                        rows.append(dict(row, output_error=float("nan"), gradient_error=float("nan"), ok=False,
                                         error=traceback.format_exc()[-1500:]))
                        continue
                    err_y, err_g = relative_error(y, ref_y), relative_error(g, ref_g)
                    ok = math.isfinite(err_y) and math.isfinite(err_g) and max(err_y, err_g) <= BOUNDS[precision]
                    rows.append(dict(row, output_error=err_y, gradient_error=err_g, ok=ok))
        rows += decoding(device, [p for p in ("float32", "bfloat16") if p in precisions])
    return rows + dropout_checks(device)


def decoding(device, precisions=("float32", "bfloat16")):
    """Causal EVA fed one token at a time (the cache) equals the full forward, on CUDA."""
    rows = []
    for dtype in (getattr(torch, p) for p in precisions):
        torch.manual_seed(1)
        module = EVAAttention(128, 4, use_rpe=True, **CASES["causal"]).to(device, dtype).eval()
        x = torch.randn(2, 77, 128, device=device, dtype=dtype)
        with torch.no_grad():
            full = module(x)
            cache = {}
            steps = torch.cat([module(x[:, t : t + 1], cache=cache) for t in range(x.size(1))], dim=1)
        err = relative_error(steps, full.double().cpu())
        bound = BOUNDS[str(dtype).split(".")[1]]
        rows.append(dict(check="causal, incremental decoding = full forward", precision=str(dtype).split(".")[1],
                         output_error=err, gradient_error=float("nan"), bound=bound, ok=err <= bound))
    return rows


def dropout_checks(device, p=0.1, draws=400):
    """Attention dropout 0.1 with a trainable RPE, float32: the same seed gives the same output and gradients,
    and the mean output over `draws` masks is the output without dropout, within three standard errors
    (relative error of the mean against that of one draw / sqrt(draws))."""
    rows = []
    for name, options in CASES.items():
        torch.manual_seed(2)
        module = EVAAttention(128, 4, use_rpe=True, dropout=p, **options).to(device).train()
        x = torch.randn(2, 300, 128, device=device, requires_grad=True)

        def run(seed):
            torch.manual_seed(seed)
            y = module(x)
            return y, torch.autograd.grad(y.square().sum(), [x, *module.parameters()])

        with pinned_noise():
            (y1, g1), (y2, g2) = run(0), run(0)
        # the same masks: equal up to rounding (CUDA's fused kernels may sum in a different order each call;
        # other masks would differ by ~0.3, one draw's distance below)
        y_diff = relative_error(y1.detach(), y2.detach().double().cpu())
        g_diff = relative_error(torch.cat([g.flatten() for g in g1]), torch.cat([g.flatten() for g in g2]).double().cpu())
        rows.append(dict(check=f"{name}, dropout {p}: same seed, same output and gradients", precision="float32",
                         output_error=y_diff, gradient_error=g_diff, bound=1e-5, ok=max(y_diff, g_diff) <= 1e-5))
        with torch.no_grad(), pinned_noise():
            mean = sum(module(x) for _ in range(draws)) / draws
            module.dropout.p = 0.0
            plain = module(x)
            module.dropout.p = p
        err = relative_error(mean, plain.double().cpu())
        dropped = relative_error(y1.detach(), plain.double().cpu())  # one draw: far from it (the mask applies)
        bound = 3 * dropped / math.sqrt(draws)  # three standard errors of the mean
        rows.append(dict(check=f"{name}, dropout {p}: mean of {draws} draws = no dropout (one draw: {dropped:.2f})",
                         precision="float32", output_error=err, gradient_error=float("nan"), bound=bound,
                         ok=err <= bound and dropped > 1e-2))
    return rows


def runnable(mechanisms, errors, N=1024):
    """The mechanisms whose layer runs forward + backward on CUDA in bfloat16; the others' errors go to
    `errors` (so that one failing layer does not cost the table)."""
    kept = []
    for name in mechanisms:
        try:
            layer = speed.MECHANISMS[name][0](512, 8).to("cuda", torch.bfloat16).train()
            layer(torch.randn(1, N, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)).sum().backward()
            kept.append(name)
        except Exception:
            errors[f"speed, {name}"] = traceback.format_exc()[-3000:]
    return kept


def speed_check(out, quick, errors, batch=1, lengths=None, name="speed"):
    """Layer forward + backward, bfloat16: batch 1 at N = 1024 ... 32768 (with plot), or the given lengths."""
    lengths = lengths or ["1024", "2048", "4096", "8192"] + ([] if quick else ["16384", "32768"])
    mechanisms = runnable(["sdpa", "eva", "eva+rpe+dropout", "sdpa-causal", "eva-causal", "eva-causal+rpe+dropout"], errors)
    plot = ["--plot", os.path.join(out, f"{name}.png")] if batch == 1 else ["--plot", ""]
    return speed.main(["--device", "cuda", "--dtype", "bfloat16", "--batch", str(batch), "--lengths", *lengths,
                       "--mechanisms", *mechanisms, "--repeats", "5", "--min-time", "0.05", "--budget", "5",
                       "--json", os.path.join(out, f"{name}.json"), *plot])


def fairseq_env():
    return {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONWARNINGS": "ignore"}


def tool(name, *args, log=None):
    """Runs a fairseq command-line tool with this Python (so that the same fairseq and torch are used)."""
    code = f"import sys; from fairseq_cli.{name} import cli_main; sys.argv[0] = '{name}'; sys.exit(cli_main())"
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=fairseq_env())
    if log:
        with open(log, "w") as f:
            f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0 and not (name == "train" and "done training" in proc.stdout + proc.stderr):
        raise RuntimeError(f"fairseq {name} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


def fairseq_check(out, quick, device_args=("--fp16",), updates=None, data=None):
    updates = updates or (50 if quick else 200)
    data = data or os.path.join(out, "data")
    mt, lm = os.path.join(data, "mt-bin"), os.path.join(data, "lm-bin")
    if not os.path.exists(os.path.join(mt, "dict.en.txt")):
        tool("preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", f"{SAMPLE}/po_en_de/train",
             "--validpref", f"{SAMPLE}/po_en_de/valid", "--destdir", mt, "--joined-dictionary", "--nwordssrc", "8000",
             "--workers", "4")
    if not os.path.exists(os.path.join(lm, "dict.txt")):
        tool("preprocess", "--only-source", "--trainpref", f"{SAMPLE}/doc_en/train.txt", "--validpref",
             f"{SAMPLE}/doc_en/valid.txt", "--destdir", lm, "--nwordssrc", "8000", "--workers", "4")
    train_args = ["--user-dir", os.path.join(REPO, "fairseq_eva"), *device_args, "--optimizer", "adam", "--lr", "5e-4",
              "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50", "--max-update", str(updates), "--no-save",
              "--log-format", "json", "--log-interval", str(max(1, updates // 20)), "--seed", "1", "--disable-validation",
              "--num-workers", "0"]
    runs = {
        "translation, EVA encoder": [mt, "--arch", "transformer_eva_tiny", "--max-tokens", "4096", "--share-all-embeddings"],
        "translation, softmax": [mt, "--arch", "transformer_eva_tiny", "--encoder-attention", "softmax", "--max-tokens", "4096",
                                 "--share-all-embeddings"],
        "LM, causal EVA (RPE, dropout 0.1)": [lm, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
                                              "--tokens-per-sample", "512", "--max-tokens", "4096", "--attention-dropout", "0.1"],
        "LM, softmax": [lm, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny", "--decoder-attention", "softmax",
                        "--tokens-per-sample", "512", "--max-tokens", "4096", "--attention-dropout", "0.1"],
    }
    rows = []
    for name, args in runs.items():
        log = os.path.join(out, re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".log")
        start = time.time()
        text = tool("train", *args, *train_args, log=log)  # (an abort at exit after "done training" is logged, not fatal)
        records = common.fairseq_json_records(text, "train_inner")
        losses = [r["loss"] for r in records]
        wps = [r["wps"] for r in records[1:]]  # the first interval holds the start-up
        nan = float("nan")
        rows.append(dict(run=name, updates=updates, first_loss=losses[0] if losses else nan,
                         last_loss=losses[-1] if losses else nan, finite=bool(losses) and all(map(math.isfinite, losses)),
                         words_per_second=sorted(wps)[len(wps) // 2] if wps else nan, seconds=time.time() - start))
    return rows


def summary(result):
    lines = [f"# GPU check on {result['device']} (torch {result['torch']})", ""]
    if result.get("correctness"):
        lines += ["| check | precision | output error | gradient error | bound | ok |", "|---|---|---|---|---|---|"]
        for r in result["correctness"]:
            lines.append(f"| {r['check']} | {r['precision']} | {r['output_error']:.2e} | {r['gradient_error']:.2e} | "
                         f"{r['bound']:.0e} | {'yes' if r['ok'] else 'NO'} |")
        lines.append("")
    for key, batch in (("speed", 1), (f"speed_batch{BATCH}", BATCH)):
        if not result.get(key):
            continue
        lines += [f"Batch {batch}:", "", "| N | mechanism | layer fwd+bwd (ms) | peak (MiB) |", "|---|---|---|---|"]
        for r in result[key]["rows"]:
            lines.append(f"| {r['N']} | {r['mechanism']} | {1e3 * r['layer_s']:.2f} | {r.get('peak_bytes', 0) / 2**20:.0f} |")
        lines += ["", "| N | mechanism vs baseline | layer speed-up | memory ratio |", "|---|---|---|---|"]
        for s in result[key]["speedups"]:
            memory = s.get("memory_ratio", float("nan"))
            lines.append(f"| {s['N']} | {s['mechanism']} vs {s['baseline']} | {s['layer_speedup']:.2f}x | {memory:.2f} |")
        lines.append("")
    if result.get("fairseq"):
        lines += ["| fairseq-train --fp16 | updates | first loss | last loss | finite | words/s | seconds |",
                  "|---|---|---|---|---|---|---|"]
        for r in result["fairseq"]:
            lines.append(f"| {r['run']} | {r['updates']} | {r['first_loss']:.2f} | {r['last_loss']:.2f} | "
                         f"{'yes' if r['finite'] else 'NO'} | {r['words_per_second']:.0f} | {r['seconds']:.0f} |")
    for r in result.get("correctness", []):
        if r.get("error"):
            lines.append(f"\n{r['check']}, {r['precision']}:\n{r['error']}")
    for name, error in result.get("errors", {}).items():
        lines.append(f"\n{name} FAILED: {error}")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device is visible to torch (torch.cuda.is_available() is False)")
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "errors": {}}
    batched = f"speed_batch{BATCH}"
    steps = [("correctness", lambda: correctness(device)), ("speed", lambda: speed_check(args.out, args.quick, result["errors"])),
             (batched, lambda: speed_check(args.out, args.quick, result["errors"], BATCH, ["4096", "16384"], batched)),
             ("fairseq", lambda: fairseq_check(args.out, args.quick, data=args.data))]
    for name, step in steps:
        if name in args.skip:
            continue
        start = time.time()
        try:
            value = step()
            result[name] = {"rows": value[0], "speedups": value[1]} if name.startswith("speed") else value
        except Exception:  # one failing part must not hide the others' results
            result["errors"][name] = traceback.format_exc()[-3000:]
        print(f"[gpu_check] {name}: {time.time() - start:.0f} s", flush=True)
        with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
            json.dump(result, f, indent=1, default=str)
    text = summary(result)
    with open(os.path.join(args.out, "gpu_check.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    failed = result["errors"] or any(not r["ok"] for r in result.get("correctness", [])) or any(
        not r["finite"] for r in result.get("fairseq", []))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
