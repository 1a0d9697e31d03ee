"""The modes part: the layer as users run it, eager and under each --eva-compile mode, beside the SDPA layers and
an earlier record's time of the same layer."""

import json
import os
import time

import torch

from benchmarks import common, speed
from benchmarks.gpu_check.layers import D_MODEL, LAYERS, attention_flops, profile_layer
from benchmarks.gpu_check.plan import OUT_OF_TIME, REPO, number

# the layer as users run it: eager, and under each --eva-compile mode, beside the SDPA layers (eager, as fairseq runs them)
MODE_LAYERS = ("sdpa", "eva", "eva+rpe+dropout", "sdpa-causal", "eva-causal", "eva-causal+rpe+dropout")
# the speed tables' numbers before the layer's host work was cut (eager), which the modes table sets beside its own
BEFORE = [os.path.join("benchmarks", "results", "gpu", "triton_check", name) for name in
          ("correctness_speed_tokens.json", "speed_batch1_paper_configs_clean_exit.json")]


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


def run(check, deadline):
    emit = check.table("modes", kernel=check.args.speed_kernel, derive=mode_ratios)
    s = check.settings
    modes_part(s["mode_shapes"], s["modes"], check.args.speed_kernel, check.device, check.dtype, deadline, emit,
               before=BEFORE, order=s["mode_order"])
    return "ok"


def summary(result):
    """The part's section of gpu_check.md."""
    lines = []
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
    return lines
