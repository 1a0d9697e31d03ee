"""Every attention mechanism of the registry, one layer's forward + backward against N: time and peak memory,
at the paper's masked-LM settings and at equal cost, beside EVA and softmax in the same run.

Settings (PAPER): the masked-LM table's (benchmarks/paper.json), without the relative position bias of EVA's and
local attention's layer; RoBERTa-base's width (768, 12 heads). "Equal cost" sets each mechanism's knob (KNOBS) so that
its multiply-adds per token (the registry's cost formulas, docs/usage.md) come closest to EVA's at that N; a
mechanism without a knob (ELU) keeps its only setting. Time and memory go through benchmarks/common.py
(interleaved medians; exact peak of live CPU bytes). Exact softmax is measured up to --softmax-max-len.

    python -m benchmarks.mechanisms                  # the run of docs/results.md
    python -m benchmarks.mechanisms --lengths 512 1024 --repeats 3 --settings paper
"""

import argparse
import sys

import torch

from benchmarks import common, paper
from benchmarks.speed import layer_call
from fairseq_eva.attention import registry

D_MODEL, HEADS = 768, 12
# the masked-LM table's settings (benchmarks/paper.json) of each mechanism it has, without the relative position
# bias of EVA's and local attention's layer
PAPER = {row[:-len("_2048")]: {**paper.settings("mlm", row), **({"use_rpe": False} if row.startswith(("eva", "local")) else {})}
         for row in paper.rows("mlm") if row.endswith("_2048")}
EVA = PAPER["eva"]
# the option that sets each mechanism's cost (its declaration's knob)
KNOBS = {name: mechanism.knob for name, mechanism in registry.MECHANISMS.items() if mechanism.knob}


def options(name, N, setting):
    """The keyword options of `name` at `setting` ("paper" or "equal-cost") and length N."""
    base = dict(PAPER.get(name, {}))
    if name == "linformer":
        base["max_positions"] = max(N, base.get("max_positions", 0))
    if setting == "paper" or name not in KNOBS:
        return base
    return {**base, KNOBS[name]: knob_for_cost(name, N, D_MODEL, HEADS, cost("eva", N, EVA), base)}


def cost(name, N, opts, embed_dim=D_MODEL, num_heads=HEADS, causal=False):
    return registry.get(name).macs_per_token(N, embed_dim, num_heads, causal=causal, **opts)


def knob_for_cost(name, N, embed_dim, num_heads, target, base, causal=False):
    """The value (1 .. N) of `name`'s knob whose cost per token is closest to `target`, among those the module
    accepts; of two equally close (Combiner's span s and N / s cost the same), the one nearer the paper's."""
    knob = KNOBS[name]
    paper = base.get(knob, registry.get(name).defaults()[knob])

    def gap(value):
        return round(abs(cost(name, N, {**base, knob: value}, embed_dim, num_heads, causal) - target))

    ranked = sorted(range(1, N + 1), key=lambda value: (gap(value), abs(value - paper)))
    return next(v for v in ranked if builds(name, {**base, knob: v}, embed_dim, num_heads, causal))


def builds(name, opts, embed_dim=D_MODEL, num_heads=HEADS, causal=False):
    try:
        with torch.device("meta"):
            registry.build(name, embed_dim, num_heads, causal=causal, **opts)
        return True
    except ValueError:
        return False


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--mechanisms", nargs="+", default=registry.choices(), choices=registry.choices())
    parser.add_argument("--settings", nargs="+", default=["paper", "equal-cost"], choices=["paper", "equal-cost"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="samples per candidate (the median is reported)")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds a sample lasts at least")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of samples per candidate and length")
    parser.add_argument("--softmax-max-len", type=int, default=8192, help="longest N for exact softmax")
    common.add_common_args(parser, "benchmarks/results/mechanisms/speed.json", "docs/img/mechanisms_speed.png")
    return parser.parse_args(argv)


def measure(args, N, setting, device):
    names = [m for m in args.mechanisms if m != "softmax" or N <= args.softmax_max_len]
    if setting == "equal-cost":
        names = [m for m in names if m in KNOBS or m in ("eva",)]
    torch.manual_seed(args.seed)
    chosen = {name: options(name, N, setting) for name in names}
    layers = {name: registry.build(name, D_MODEL, HEADS, **opts).train() for name, opts in chosen.items()}
    x = torch.randn(args.batch, N, D_MODEL, device=device, requires_grad=True)
    grad = torch.randn(args.batch, N, D_MODEL, device=device)
    times = common.time_interleaved({n: layer_call(m.to(device), x, grad) for n, m in layers.items()}, device,
                                    args.repeats, args.min_time, args.budget, common.clock(args.clock))
    rows = []
    for name in names:
        row = dict(N=N, setting=setting, mechanism=name, options=chosen[name], macs_per_token=cost(name, N, chosen[name]),
                   layer_s=common.median(times[name]), samples=times[name],
                   peak_bytes=common.peak_memory(layer_call(layers[name], x, grad), device))
        rows.append(row)
        print(f"{setting:10s} N={N:6d} {name:11s} {row['layer_s']:8.4f} s {row['peak_bytes'] / 2**20:8.1f} MiB "
              f"{row['macs_per_token'] / D_MODEL:7.0f} D MACs/token  {chosen[name]}", flush=True)
    eva = next(r for r in rows if r["mechanism"] == "eva")
    for row in rows:  # against EVA in the same run: the median of the per-round ratios
        row["time_vs_eva"] = common.median([a / b for a, b in zip(row["samples"], eva["samples"])])
        row["memory_vs_eva"] = row["peak_bytes"] / eva["peak_bytes"]
    return rows


def markdown(rows):
    lines = ["| setting | N | mechanism | options | MACs/token (D) | layer (s) | vs EVA | peak (MiB) | vs EVA |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        opts = ", ".join(f"{k} {v}" for k, v in r["options"].items() if k not in ("use_rpe", "max_positions"))
        lines.append(f"| {r['setting']} | {r['N']} | {r['mechanism']} | {opts or '-'} | {r['macs_per_token'] / D_MODEL:.0f} | "
                     f"{r['layer_s']:.3f} | {r['time_vs_eva']:.2f}x | {r['peak_bytes'] / 2**20:.0f} | "
                     f"{r['memory_vs_eva']:.2f}x |")
    return "\n".join(lines)


def plot(rows, path):
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    fig, axes = common.figure(2 * len(settings))
    import matplotlib

    colours = matplotlib.colormaps["tab20"]  # one colour a mechanism, the same in every panel
    for i, setting in enumerate(settings):
        for j, (key, title) in enumerate((("layer_s", "time, forward + backward (s)"), ("peak_bytes", "peak memory (MiB)"))):
            ax = axes[2 * i + j]
            for name in dict.fromkeys(r["mechanism"] for r in rows if r["setting"] == setting):
                points = [(r["N"], r[key] * (2**-20 if key == "peak_bytes" else 1)) for r in rows
                          if r["setting"] == setting and r["mechanism"] == name]
                ax.plot(*zip(*points), "-o" if name == "eva" else "-", label=name, markersize=3,
                        linewidth=2.2 if name == "eva" else 1.2, color=colours(registry.choices().index(name)))
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length N")
            ax.set_title(f"{title}, {setting}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    common.save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    info = {**common.machine(device), "commit": common.commit()}
    rows = []
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.mechanisms " + " ".join(sys.argv[1:] if argv is None else argv)
    for setting in args.settings:
        for N in args.lengths:
            rows += measure(args, N, setting, device)
            # written after each length: a run stopped early keeps the lengths it measured
            common.write_json(args.json, dict(benchmark="mechanisms", command=command, machine=info, settings=settings,
                                              d_model=D_MODEL, heads=HEADS, results=rows))
    if args.plot:
        plot(rows, args.plot)
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
