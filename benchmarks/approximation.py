"""Approximation error against exact softmax attention on the same inputs: EVA as abs(E) and C vary, and every
mechanism of the registry that estimates softmax attention without trained parameters, at EVA's cost.

Error: ||Y - Y_softmax||_F / ||Y_softmax||_F of the per-head attention outputs (before the output
projection), in float64, averaged over the input sets (random draws, or the layers of the model).

Inputs:
- random: q, k, v with N(0, 1) entries (1 sequence, H heads of d = 64), several draws;
- model: the q, k, v of every layer of a small byte-level softmax LM trained here for a few minutes on
  data/sample/doc_en (benchmarks/tiny_lm.py, cached), on the validation text.
EVA runs in evaluation mode (omega = mu) with the identity proposal: sigma is learned in the paper, and an
untrained Linear + LayerNorm would be a random map, so the parameter-free choice k~_c = mean key, omega_c =
mean query + mean key is used. The grid: bidirectional EVA over abs(E) = window and C = number of chunks
(C = 0: block-local attention), causal EVA over windows and chunk sizes s (C = N / s chunks in all).

At equal cost (--costs): for each EVA setting, each mechanism's knob is set so that its multiply-adds per token
(the registry's cost formulas) come closest to EVA's (benchmarks/mechanisms.knob_for_cost), in evaluation mode
and without trained parameters: Performer (positive and ReLU random features; mean over --seeds draws), RFA
(its initial sigma), ELU (no knob: its only setting), LARA (identity proposal, omega = mu), Combiner (max-pool
abstractions), local attention. Left out, because their error depends on trained parameters: Linformer (its
length projections), Transformer-LS (its dynamic projection), T2R (its feature map); and Reformer, whose keys
are its normalised queries (shared QK), so it does not estimate attention over these keys.

    python -m benchmarks.approximation          # the run of docs/results.md (a few minutes: trains the LM once)
"""

import argparse
import statistics
import sys

import torch

from benchmarks import common, mechanisms, tiny_lm
from benchmarks.baselines import softmax_attention
from fairseq_eva.attention import EVAAttention, registry

# the estimators of softmax attention without trained parameters, at equal cost: row name -> (mechanism, options)
EQUAL_COST = {
    "local": ("local", dict(use_rpe=False)),
    "performer": ("performer", dict(kernel="positive")),
    "performer-relu": ("performer", dict(kernel="relu")),
    "rfa": ("rfa", {}),
    "elu": ("elu", {}),
    "lara": ("lara", dict(proposal="identity")),
    "combiner": ("combiner", dict(abstraction="max", use_rpe=False)),
}
RANDOM = ("performer", "performer-relu", "rfa")  # rows whose features are drawn: the mean over --seeds draws


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1024, help="sequence length N")
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 32, 64, 128, 256], help="abs(E), bidirectional")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 8, 16, 32, 64, 128], help="C, bidirectional")
    parser.add_argument("--causal-windows", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[0, 4, 8, 16], help="s, causal (0: no chunks)")
    parser.add_argument("--costs", nargs="+", default=["64,32", "128,64", "256,128"],
                        help="EVA settings abs(E),C (bidirectional; causal: window,chunk size) of the equal-cost tables")
    parser.add_argument("--causal-costs", nargs="+", default=["32,8", "64,8", "128,8"])
    parser.add_argument("--seeds", type=int, default=5, help="draws of the random-feature rows")
    parser.add_argument("--heads", type=int, default=4, help="heads of the random inputs")
    parser.add_argument("--random-draws", type=int, default=3)
    parser.add_argument("--inputs", nargs="+", default=["random", "model"], choices=["random", "model"])
    parser.add_argument("--lm-steps", type=int, default=1000, help="training steps of the tiny LM")
    parser.add_argument("--lm-cache", default="/tmp/fairseq_eva_bench", help="where the trained tiny LM is kept")
    common.add_common_args(parser, "benchmarks/results/approximation.json", "docs/img/approximation.png")
    return parser.parse_args(argv)


def relative_error(y, exact):
    return ((y - exact).norm() / exact.norm()).item()


def input_sets(args):
    """name -> list of (q, k, v), each 1 x H x N x 64 in float64."""
    sets = {}
    if "random" in args.inputs:
        g = torch.Generator().manual_seed(args.seed)
        shape = (1, args.heads, args.length, 64)
        sets["random"] = [
            tuple(torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3)) for _ in range(args.random_draws)
        ]
    if "model" in args.inputs:
        model = tiny_lm.trained(args.lm_cache, args.lm_steps, seq_len=args.length, seed=args.seed)
        sets["model"] = tiny_lm.validation_qkv(model, args.length)
    return sets


def eva_error(qkvs, exacts, causal, **options):
    q = qkvs[0][0]
    H, d = q.size(1), q.size(-1)
    module = EVAAttention(H * d, H, causal=causal, proposal="identity", use_rpe=False, **options).double().eval()
    with torch.no_grad():
        return statistics.mean(relative_error(module.attention(*qkv), y) for qkv, y in zip(qkvs, exacts))


def mechanism_error(qkvs, exacts, causal, name, options, seeds):
    """The mean error of a registry mechanism's attention (evaluation mode, float64), over the inputs and seeds."""
    q = qkvs[0][0]
    H, d = q.size(1), q.size(-1)
    errors = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        module = registry.build(name, H * d, H, causal=causal, **options).double().eval()
        with torch.no_grad():
            for qkv, y in zip(qkvs, exacts):
                x = torch.zeros(1, q.size(2), H * d, dtype=torch.float64)  # the layer input: unused by these rows
                y_hat = module.attention(*qkv) if isinstance(module, EVAAttention) else module.attend(x, *qkv, None)
                errors.append(relative_error(y_hat, y))
    return statistics.mean(errors)


def equal_cost(args, qkvs, exacts, causal):
    """Each row of EQUAL_COST at the cost of each EVA setting of --costs (--causal-costs)."""
    q = qkvs[0][0]
    N, H, d = q.size(2), q.size(1), q.size(-1)
    out = []
    for setting in args.causal_costs if causal else args.costs:
        window, chunks = (int(x) for x in setting.split(","))
        eva = dict(window_size=window, chunk_size=chunks) if causal else dict(window_size=window, num_chunks=chunks)
        target = mechanisms.cost("eva", N, eva, H * d, H, causal)
        out.append(dict(causal=causal, eva=eva, mechanism="eva", options=eva, cost_d=target / (H * d),
                        error=eva_error(qkvs, exacts, causal, **eva)))
        for row, (name, base) in EQUAL_COST.items():
            if causal and registry.CAUSAL not in registry.get(name).directions:
                continue
            options = dict(base)
            if name in mechanisms.KNOBS:
                options[mechanisms.KNOBS[name]] = mechanisms.knob_for_cost(name, N, H * d, H, target, base, causal)
            out.append(dict(causal=causal, eva=eva, mechanism=row, options=options,
                            cost_d=mechanisms.cost(name, N, options, H * d, H, causal) / (H * d),
                            error=mechanism_error(qkvs, exacts, causal, name, options, args.seeds if row in RANDOM else 1)))
    return out


def measure(args, qkvs):
    rows = []
    for causal in (False, True):
        with torch.no_grad():
            exacts = [softmax_attention(*qkv, causal=causal) for qkv in qkvs]
        if not causal:
            for w in args.windows:
                for C in args.chunks:
                    if C <= args.length:
                        rows.append(dict(mechanism="eva", causal=False, window=w, chunks=C,
                                         error=eva_error(qkvs, exacts, False, window_size=w, num_chunks=C)))
            for C in args.chunks:
                if 0 < C <= args.length:  # no local set: the chunks alone (C = 1 is the RFA connection)
                    rows.append(dict(mechanism="eva", causal=False, window=0, chunks=C,
                                     error=eva_error(qkvs, exacts, False, window_size=0, num_chunks=C)))
        else:
            for w in args.causal_windows:
                for s in args.chunk_sizes:
                    if s == 0 or w % s == 0:
                        rows.append(dict(mechanism="eva", causal=True, window=w, chunk_size=s,
                                         chunks=args.length // s if s else 0,
                                         error=eva_error(qkvs, exacts, True, window_size=w, chunk_size=s)))
    return rows


def plot(results, args, path):
    panels = [(name, causal) for causal in (False, True) for name in results]
    fig, axes = common.figure(len(panels), width=4.2)
    for ax, (name, causal) in zip(axes, panels):
        rows = [r for r in results[name]["rows"] if r["causal"] == causal and r["mechanism"] == "eva"]
        xs = sorted({r["chunks"] for r in rows})
        for w in args.causal_windows if causal else [0] + args.windows:
            points = sorted((xs.index(r["chunks"]), r["error"]) for r in rows if r["window"] == w)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], "-o", markersize=3, label=f"EVA |E|={w}")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel("chunks C = N / s in all (0: local only)" if causal else "chunks C (0: local only)")
        ax.set_yscale("log")
        ax.set_ylabel("relative error vs softmax")
        ax.set_title(f"{'causal' if causal else 'bidirectional'}, {name} inputs, N={args.length}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    common.save_figure(fig, path)


def markdown(rows, inputs):
    """The equal-cost table: one row per EVA setting, the mechanisms' errors in columns."""
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    lines = []
    for causal in (False, True):
        settings = list(dict.fromkeys(tuple(r["eva"].values()) for r in rows if r["causal"] == causal))
        shown = [n for n in names if any(r["mechanism"] == n and r["causal"] == causal for r in rows)]
        head = "window, chunk size" if causal else "abs(E), C"
        lines += ["", f"| {'causal' if causal else 'bidirectional'}, {inputs} inputs: EVA's {head} (cost) | "
                  + " | ".join(shown) + " |", "|---" * (len(shown) + 1) + "|"]
        for setting in settings:
            cells = {r["mechanism"]: r for r in rows if r["causal"] == causal and tuple(r["eva"].values()) == setting}
            lines.append(f"| {', '.join(map(str, setting))} ({cells['eva']['cost_d']:.0f} D) | " + " | ".join(
                f"{cells[n]['error']:.3f}" if n in cells else "-" for n in shown) + " |")
    return "\n".join(lines)


def plot_equal_cost(results, path):
    """Error against cost per mechanism, one panel per input set and direction."""
    panels = [(name, causal) for causal in (False, True) for name in results]
    fig, axes = common.figure(len(panels), width=4.2)
    for ax, (name, causal) in zip(axes, panels):
        rows = [r for r in results[name]["equal_cost"] if r["causal"] == causal]
        for mechanism in dict.fromkeys(r["mechanism"] for r in rows):
            points = [(r["cost_d"], r["error"]) for r in rows if r["mechanism"] == mechanism]
            ax.plot(*zip(*points), "-o" if mechanism == "eva" else "-", markersize=3, label=mechanism,
                    linewidth=2.2 if mechanism == "eva" else 1.2)
        ax.set(yscale="log", xlabel="multiply-adds per token / D (EVA's settings)", ylabel="relative error vs softmax")
        ax.set_title(f"{'causal' if causal else 'bidirectional'}, {name} inputs, equal cost", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    common.save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    info = {**common.machine(device), "commit": common.commit()}
    results = {}
    for name, qkvs in input_sets(args).items():
        rows = measure(args, qkvs)
        same_cost = []
        for causal in (False, True):
            with torch.no_grad():
                exacts = [softmax_attention(*qkv, causal=causal) for qkv in qkvs]
            same_cost += equal_cost(args, qkvs, exacts, causal)
        results[name] = {"rows": rows, "equal_cost": same_cost}
        for r in rows:
            shape = f"|E|={r.get('window', '-')} C={r.get('chunks', '-')}"
            print(f"{name:6s} {'causal' if r['causal'] else 'bidir':6s} {r['mechanism']:14s} {shape:18s} {r['error']:.4f}")
        print(markdown(same_cost, name))
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.approximation " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_json(args.json, {"benchmark": "approximation", "command": command,
                                  "machine": info, "settings": settings, "results": results})
    if args.plot:
        plot(results, args, args.plot)
        plot_equal_cost(results, args.plot.replace(".png", "_equal_cost.png"))
    return results


if __name__ == "__main__":
    main()
