"""Approximation error against exact softmax attention on the same inputs, as abs(E) and C vary.

Error: ||Y - Y_softmax||_F / ||Y_softmax||_F of the per-head attention outputs (before the output
projection), in float64, averaged over the input sets (random draws, or the layers of the model).

Inputs:
- random: q, k, v with N(0, 1) entries (1 sequence, H heads of d = 64), several draws;
- model: the q, k, v of every layer of a small byte-level softmax LM trained here for a few minutes on
  data/sample/doc_en (benchmarks/tiny_lm.py, cached), on the validation text.
Mechanisms: bidirectional EVA over a grid of abs(E) = window and C = number of chunks (C = 0: block-local
attention), causal EVA over windows and chunk sizes s (C = N / s chunks in all), Performer with positive
orthogonal random features (bidirectional; mean over seeds). EVA runs in evaluation mode (omega = mu)
with the identity proposal: sigma is learned in the paper, and an untrained Linear + LayerNorm would be
a random map, so the parameter-free choice k~_c = mean key, omega_c = mean query + mean key is used.

    python -m benchmarks.approximation          # the run of docs/results.md (a few minutes: trains the LM once)
"""

import argparse
import statistics
import sys

import torch

from benchmarks import common, tiny_lm
from benchmarks.baselines import PerformerAttention, softmax_attention
from fairseq_eva.attention import EVAAttention


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1024, help="sequence length N")
    parser.add_argument("--windows", type=int, nargs="+", default=[16, 32, 64, 128, 256], help="abs(E), bidirectional")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 8, 16, 32, 64, 128], help="C, bidirectional")
    parser.add_argument("--causal-windows", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--chunk-sizes", type=int, nargs="+", default=[0, 4, 8, 16], help="s, causal (0: no chunks)")
    parser.add_argument("--features", type=int, nargs="+", default=[64, 128, 256], help="Performer feature counts")
    parser.add_argument("--performer-seeds", type=int, default=5)
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


def performer_error(qkvs, exacts, features, seeds):
    errors = []
    for seed in range(seeds):
        module = PerformerAttention(qkvs[0][0].size(-1), features, seed=seed).double()
        errors += [relative_error(module(*qkv), y) for qkv, y in zip(qkvs, exacts)]
    return statistics.mean(errors)


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
            for m in args.features:
                rows.append(dict(mechanism=f"performer-{m}", causal=False, features=m,
                                 error=performer_error(qkvs, exacts, m, args.performer_seeds)))
        else:
            for w in args.causal_windows:
                for s in args.chunk_sizes:
                    if s == 0 or w % s == 0:
                        rows.append(dict(mechanism="eva", causal=True, window=w, chunk_size=s,
                                         chunks=args.length // s if s else 0,
                                         error=eva_error(qkvs, exacts, True, window_size=w, chunk_size=s)))
    return rows


def equal_cost(rows, features):
    """EVA at abs(E) + C = m (bidirectional) against Performer with m features: both O(N m d)."""
    out = []
    for m in features:
        performer = [r["error"] for r in rows if r["mechanism"] == f"performer-{m}"]
        evas = [r for r in rows if r["mechanism"] == "eva" and not r["causal"] and r["window"] + r["chunks"] == m]
        for r in evas:
            out.append(dict(cost=m, window=r["window"], chunks=r["chunks"], eva_error=r["error"],
                            performer_error=performer[0] if performer else None))
    return out


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
        if not causal:
            for r in results[name]["rows"]:
                if r["mechanism"].startswith("performer"):
                    ax.axhline(r["error"], linestyle="--", linewidth=1, color="grey")
                    ax.text(len(xs) - 1, r["error"], r["mechanism"], fontsize=6, va="bottom", ha="right")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel("chunks C = N / s in all (0: local only)" if causal else "chunks C (0: local only)")
        ax.set_yscale("log")
        ax.set_ylabel("relative error vs softmax")
        ax.set_title(f"{'causal' if causal else 'bidirectional'}, {name} inputs, N={args.length}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    common.save_figure(fig, path)


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    info = common.machine(device)
    results = {}
    for name, qkvs in input_sets(args).items():
        rows = measure(args, qkvs)
        results[name] = {"rows": rows, "equal_cost": equal_cost(rows, args.features)}
        for r in rows:
            shape = f"|E|={r.get('window', '-')} C={r.get('chunks', '-')}" if r["mechanism"] == "eva" else ""
            print(f"{name:6s} {'causal' if r['causal'] else 'bidir':6s} {r['mechanism']:14s} {shape:18s} {r['error']:.4f}")
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.approximation " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_json(args.json, {"benchmark": "approximation", "command": command,
                                  "machine": info, "settings": settings, "results": results})
    if args.plot:
        plot(results, args, args.plot)
    return results


if __name__ == "__main__":
    main()
