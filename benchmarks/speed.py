"""Time and peak memory of one attention layer, forward and backward, against sequence length.

For each length N, every mechanism of benchmarks/baselines.py is timed on the same input, interleaved
and repeated (benchmarks/common.py): the whole layer (the four projections included) and the attention
alone (on per-head q, k, v laid out as the projections leave them). "projections" is the floor: the
four projections with q + k + v as attention. Peak memory is that of the whole layer's forward and
backward. Speed-ups are baseline time / mechanism time (the median of the ratios of each round of the
interleaving), memory ratios mechanism / baseline, from the same run.

    python -m benchmarks.speed                       # the full run of docs/results.md (minutes)
    python -m benchmarks.speed --lengths 512 1024 --repeats 3
"""

import argparse
import sys

import torch

from benchmarks import common
from benchmarks.baselines import MECHANISMS, ProjectedAttention

# (mechanism, baseline) pairs whose ratios are reported
PAIRS = [
    ("eva", "sdpa"),
    ("eva+rpe", "eva"),
    ("eva+rpe+dropout", "eva"),
    ("eva+rpe+dropout", "sdpa"),
    ("eva-causal", "sdpa-causal"),
    ("eva-causal+rpe", "eva-causal"),
    ("eva-causal+rpe+dropout", "eva-causal"),
    ("eva-causal+rpe+dropout", "sdpa-causal"),
    ("local", "sdpa"),
    ("performer-128", "sdpa"),
    ("performer-256", "sdpa"),
    ("eva", "softmax"),
    ("eva-causal", "softmax"),
]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=list(MECHANISMS))
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    parser.add_argument("--repeats", type=int, default=5, help="samples per candidate (the median is reported)")
    parser.add_argument("--min-time", type=float, default=0.3, help="seconds a sample lasts at least")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of samples per candidate and length, "
                        "beyond which fewer repeats (3 at least) are taken")
    parser.add_argument("--softmax-max-len", type=int, default=8192, help="longest N for the N x N softmax")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak memory measurements")
    common.add_common_args(parser, "benchmarks/results/speed.json", "docs/img/speed.png")
    return parser.parse_args(argv)


def layer_call(layer, x, grad):
    def run():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).backward(grad)

    return run


def attention_call(layer, q, k, v, grad):
    def run():
        layer.zero_grad(set_to_none=True)
        q.grad = k.grad = v.grad = None
        layer.attention(q, k, v).backward(grad)

    return run


def measure_length(args, N, device, dtype):
    B, D, H = args.batch, args.embed_dim, args.heads
    names = [m for m in args.mechanisms if m != "softmax" or N <= args.softmax_max_len]
    torch.manual_seed(args.seed)
    layers = {name: MECHANISMS[name][0](D, H).to(device, dtype).train() for name in names}
    layers["projections"] = ProjectedAttention(D, H, lambda q, k, v: q + k + v).to(device, dtype)
    x = torch.randn(B, N, D, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(B, N, D, device=device, dtype=dtype)
    # per-head q, k, v as the projections leave them: B x H x N x d views of B x N x H x d memory
    q, k, v = (torch.randn(B, N, H, D // H, device=device, dtype=dtype).transpose(1, 2).requires_grad_() for _ in range(3))
    grad_heads = torch.randn(B, N, H, D // H, device=device, dtype=dtype).transpose(1, 2)

    layer_times = common.time_interleaved(
        {name: layer_call(layer, x, grad) for name, layer in layers.items()}, device, args.repeats, args.min_time, args.budget,
        common.clock(args.clock),
    )
    attention_times = common.time_interleaved(
        {name: attention_call(layers[name], q, k, v, grad_heads) for name in names}, device, args.repeats, args.min_time,
        args.budget,
        common.clock(args.clock),
    )
    rows = []
    for name in list(names) + ["projections"]:
        row = {"N": N, "mechanism": name, "layer_s": common.median(layer_times[name]), "layer_samples": layer_times[name]}
        if name in attention_times:
            row["attention_s"] = common.median(attention_times[name])
            row["attention_samples"] = attention_times[name]
        if not args.no_memory:
            row["peak_bytes"] = common.peak_memory(layer_call(layers[name], x, grad), device)
        rows.append(row)
        print(f"N={N:6d} {name:14s} layer {row['layer_s']:8.4f} s  attention {row.get('attention_s', float('nan')):8.4f} s"
              f"  peak {row.get('peak_bytes', 0) / 2**20:9.1f} MiB", flush=True)
    return rows


def speedup(a, b, kind):
    """b's time / a's: the median of the per-round ratios, as the candidates of one round of
    common.time_interleaved run seconds apart and a slow spell of the machine hits both; the ratio of
    the medians where the samples do not pair up."""
    sa, sb = a.get(f"{kind}_samples"), b.get(f"{kind}_samples")
    if sa and sb and len(sa) == len(sb):
        return common.median([y / x for x, y in zip(sa, sb)])
    return b[f"{kind}_s"] / a[f"{kind}_s"]


def ratios(rows):
    """Speed-ups (baseline / mechanism) and memory ratios (mechanism / baseline) of PAIRS, per length."""
    table = {(r["N"], r["mechanism"]): r for r in rows}
    out = []
    for N in sorted({r["N"] for r in rows}):
        for mech, base in PAIRS:
            a, b = table.get((N, mech)), table.get((N, base))
            if a is None or b is None:
                continue
            entry = {"N": N, "mechanism": mech, "baseline": base, "layer_speedup": speedup(a, b, "layer")}
            if "attention_s" in a and "attention_s" in b:
                entry["attention_speedup"] = speedup(a, b, "attention")
            if a.get("peak_bytes") and b.get("peak_bytes"):
                entry["memory_ratio"] = a["peak_bytes"] / b["peak_bytes"]
            out.append(entry)
    return out


# the speed targets: (mechanism, baseline, N, quantity, bound, at least / at most)
TARGETS = [
    ("eva", "sdpa", 8192, "layer_speedup", 6.0, "min"),
    ("eva", "sdpa", 16384, "layer_speedup", 12.0, "min"),
    ("eva", "sdpa", 512, "layer_speedup", 1 / 1.3, "min"),
    ("eva-causal", "sdpa-causal", 4096, "layer_speedup", 2.0, "min"),
    ("eva-causal", "sdpa-causal", 8192, "layer_speedup", 3.0, "min"),
    ("eva", "sdpa", 8192, "memory_ratio", 2.0, "max"),
    ("eva", "sdpa", 16384, "memory_ratio", 2.0, "max"),
    ("eva-causal", "sdpa-causal", 8192, "memory_ratio", 2.0, "max"),
    ("eva-causal", "sdpa-causal", 16384, "memory_ratio", 2.0, "max"),
    # the paper's settings (trainable RPE, attention dropout 0.1) against the same layer without them
    ("eva+rpe+dropout", "eva", 8192, "layer_speedup", 1 / 1.1, "min"),
    ("eva+rpe+dropout", "eva", 16384, "layer_speedup", 1 / 1.1, "min"),
    ("eva-causal+rpe+dropout", "eva-causal", 8192, "layer_speedup", 1 / 1.1, "min"),
    ("eva-causal+rpe+dropout", "eva-causal", 16384, "layer_speedup", 1 / 1.1, "min"),
    ("eva+rpe+dropout", "sdpa", 8192, "memory_ratio", 1.3, "max"),
    ("eva+rpe+dropout", "sdpa", 16384, "memory_ratio", 1.3, "max"),
    ("eva-causal+rpe+dropout", "sdpa-causal", 8192, "memory_ratio", 1.3, "max"),
    ("eva-causal+rpe+dropout", "sdpa-causal", 16384, "memory_ratio", 1.3, "max"),
]

# peak memory from N = 8192 to 16384 may grow at most this much (linear: 2)
GROWTH = [("eva+rpe+dropout", 8192, 16384, 2.1), ("eva-causal+rpe+dropout", 8192, 16384, 2.1)]


def targets(speedups, rows=()):
    found = {(s["mechanism"], s["baseline"], s["N"]): s for s in speedups}
    peaks = {(r["N"], r["mechanism"]): r.get("peak_bytes") for r in rows}
    out = []
    for mech, small, large, bound in GROWTH:
        if peaks.get((small, mech)) and peaks.get((large, mech)):
            value = peaks[(large, mech)] / peaks[(small, mech)]
            out.append(dict(mechanism=mech, baseline=mech, N=large, quantity=f"memory_growth_from_{small}", value=value,
                            bound=bound, kind="max", met=value <= bound))
    for mech, base, N, quantity, bound, kind in TARGETS:
        value = found.get((mech, base, N), {}).get(quantity)
        if value is not None:
            met = value >= bound if kind == "min" else value <= bound
            out.append(dict(mechanism=mech, baseline=base, N=N, quantity=quantity, value=value, bound=bound, kind=kind, met=met))
    return out


def plot(rows, path):
    fig, axes = common.figure(3)
    panels = [("layer_s", "layer forward + backward (s)"), ("attention_s", "attention only, fwd + bwd (s)"),
              ("peak_bytes", "peak memory, layer (MiB)")]
    for ax, (key, title) in zip(axes, panels):
        for name in dict.fromkeys(r["mechanism"] for r in rows):
            points = [(r["N"], r[key]) for r in rows if r["mechanism"] == name and r.get(key)]
            if not points:
                continue
            scale = 2**-20 if key == "peak_bytes" else 1
            style = "-o" if name.startswith("eva") else ("--" if name == "projections" else "-")
            ax.plot([p[0] for p in points], [p[1] * scale for p in points], style, label=name, markersize=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    common.save_figure(fig, path)


def markdown(rows, speedups):
    lines = ["| N | mechanism | layer (s) | attention (s) | peak (MiB) |", "|---|---|---|---|---|"]
    for r in rows:
        attention = f"{r['attention_s']:.4f}" if "attention_s" in r else "-"
        peak = f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "-"
        lines.append(f"| {r['N']} | {r['mechanism']} | {r['layer_s']:.4f} | {attention} | {peak} |")
    lines += ["", "| N | mechanism vs baseline | layer speed-up | attention speed-up | memory ratio |", "|---|---|---|---|---|"]
    for s in speedups:
        memory = f"{s['memory_ratio']:.2f}" if "memory_ratio" in s else "-"
        attention = f"{s['attention_speedup']:.2f}x" if "attention_speedup" in s else "-"
        lines.append(f"| {s['N']} | {s['mechanism']} vs {s['baseline']} | {s['layer_speedup']:.2f}x | {attention} | {memory} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    dtype = getattr(torch, args.dtype)
    info = common.machine(device)
    rows = []
    for N in args.lengths:
        rows += measure_length(args, N, device, dtype)
    speedups = ratios(rows)
    info["load_average_at_end"] = common.machine(device)["load_average_at_start"]
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.speed " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_json(args.json, {"benchmark": "speed", "command": command,
                                  "machine": info, "settings": settings, "results": rows, "speedups": speedups,
                                  "targets": targets(speedups, rows)})
    if args.plot:
        plot(rows, args.plot)
    print(markdown(rows, speedups))
    for t in targets(speedups, rows):
        print(f"target {t['mechanism']} vs {t['baseline']} at N={t['N']}: {t['quantity']} {t['value']:.2f} "
              f"({'>=' if t['kind'] == 'min' else '<='} {t['bound']:.2f}): {'met' if t['met'] else 'MISSED'}")
    return rows, speedups


if __name__ == "__main__":
    main()
