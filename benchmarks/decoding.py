"""Incremental decoding: per-token latency and cache memory against context length.

One layer (projections included), batch 1, evaluation mode, no gradients. The decoders consume the same
tokens one at a time, in turn (interleaved). When the context reaches a measured length L, the next
`--tokens` steps (a whole window by default, so that chunk and block completions are included) are timed
and their mean and median reported, with the largest cache size over these steps (for EVA also split
into the chunk summaries and the rest: the current block's q, k, v).

- eva-causal: causal EVA (window 128, chunks of 8): the cache holds the current block (and the previous
  one with overlap) plus k~, beta of every completed chunk, O(w + L / s);
- softmax-kv-cat: exact attention with a key/value cache grown by concatenation, as fairseq's
  MultiheadAttention does, O(L) keys (each step copies the cache);
- softmax-kv: exact attention with a preallocated key/value cache written in place (the faster baseline).

    python -m benchmarks.decoding          # the run of docs/results.md (about a minute per 8K tokens)
"""

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks import common
from benchmarks.baselines import eva_causal


class SoftmaxKV(nn.Module):
    """Exact causal softmax attention for incremental decoding, with a key/value cache."""

    def __init__(self, embed_dim, num_heads, preallocate=0):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))
        self.preallocate = preallocate  # capacity of a preallocated cache; 0: grow by concatenation

    def forward(self, x, cache):
        B, T, D = x.shape  # T = 1
        projections = (self.q_proj, self.k_proj, self.v_proj)
        q, k, v = (p(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for p in projections)
        if self.preallocate:
            if "k" not in cache:
                cache["k"], cache["v"] = (x.new_zeros(B, self.num_heads, self.preallocate, self.head_dim) for _ in range(2))
                cache["length"] = 0
            n = cache["length"]
            cache["k"][:, :, n : n + T], cache["v"][:, :, n : n + T] = k, v
            cache["length"] = n + T
            keys, values = cache["k"][:, :, : n + T], cache["v"][:, :, : n + T]
        else:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = keys, values = k, v
        y = F.scaled_dot_product_attention(q, keys, values)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, D))


def cache_bytes(cache):
    """(all, chunk summaries) bytes of the tensors in a cache (of its filled part, if preallocated)."""
    tensors = {k: v for k, v in cache.items() if isinstance(v, torch.Tensor)}
    if "length" in cache:
        tensors = {k: v[:, :, : cache["length"]] for k, v in tensors.items()}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    chunks = sum(t.numel() * t.element_size() for k, t in tensors.items() if "chunks" in k)
    return total, chunks


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--tokens", type=int, default=128, help="timed steps at each context length")
    parser.add_argument("--embed-dim", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--chunk-size", type=int, default=8)
    common.add_common_args(parser, "benchmarks/results/decoding.json", "docs/img/decoding.png")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = common.setup(args)
    info = common.machine(device)
    D, H = args.embed_dim, args.heads
    total = max(args.contexts) + args.tokens
    decoders = {
        "eva-causal": eva_causal(D, H, window=args.window, chunk_size=args.chunk_size),
        "softmax-kv-cat": SoftmaxKV(D, H),
        "softmax-kv": SoftmaxKV(D, H, preallocate=total),
    }
    decoders = {name: m.to(device).eval() for name, m in decoders.items()}
    caches = {name: {} for name in decoders}
    tokens = torch.randn(1, total, D, device=device)
    measured = {c: {name: [] for name in decoders} for c in args.contexts}
    sizes = {}
    window = {}  # context length being timed -> first step after it
    timer = common.clock(args.clock)
    with torch.no_grad():
        for t in range(total):
            if t in measured:
                window[t] = t
                sizes[t] = {name: [0, 0, 0] for name in caches}  # largest (all, chunk summaries, rest) over the timed steps
            timing = [c for c, first in window.items() if first <= t < first + args.tokens]
            names = list(decoders) if t % 2 == 0 else list(decoders)[::-1]
            for name in names:
                start = timer()
                decoders[name](tokens[:, t : t + 1], cache=caches[name])
                common.synchronize(device)
                for c in timing:
                    measured[c][name].append(timer() - start)
                    total_bytes, chunk_bytes = cache_bytes(caches[name])
                    new = (total_bytes, chunk_bytes, total_bytes - chunk_bytes)
                    sizes[c][name] = [max(a, b) for a, b in zip(sizes[c][name], new)]
    rows = []
    for c in args.contexts:
        for name in decoders:
            times = measured[c][name]
            total_bytes, chunk_bytes, local_bytes = sizes[c][name]
            rows.append(dict(context=c, mechanism=name, latency_mean_s=statistics.mean(times),
                             latency_median_s=statistics.median(times),
                             cache_bytes=total_bytes, chunk_summary_bytes=chunk_bytes, local_bytes=local_bytes))
            mean_ms, median_ms = 1e3 * rows[-1]["latency_mean_s"], 1e3 * rows[-1]["latency_median_s"]
            print(f"context {c:6d} {name:15s} {mean_ms:7.3f} ms/token (median {median_ms:7.3f})"
                  f"  cache {total_bytes / 2**20:8.2f} MiB (chunk summaries {chunk_bytes / 2**20:.2f},"
                  f" rest {local_bytes / 2**20:.2f})", flush=True)
    info["load_average_at_end"] = common.machine(device)["load_average_at_start"]
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
    command = "python -m benchmarks.decoding " + " ".join(sys.argv[1:] if argv is None else argv)
    common.write_json(args.json, {"benchmark": "decoding", "command": command,
                                  "machine": info, "settings": settings, "results": rows})
    if args.plot:
        plot(rows, args.plot)
    return rows


def plot(rows, path):
    fig, axes = common.figure(2)
    for name in dict.fromkeys(r["mechanism"] for r in rows):
        mine = [r for r in rows if r["mechanism"] == name]
        xs = [r["context"] for r in mine]
        axes[0].plot(xs, [1e3 * r["latency_mean_s"] for r in mine], "-o", markersize=3, label=name)
        axes[1].plot(xs, [r["cache_bytes"] / 2**20 for r in mine], "-o", markersize=3, label=name)
        if name.startswith("eva"):
            axes[1].plot(xs, [r["local_bytes"] / 2**20 for r in mine], ":", label=f"{name}: without chunk summaries")
    for ax, title in zip(axes, ["per-token latency (ms), one layer", "cache memory (MiB), one layer"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    common.save_figure(fig, path)


if __name__ == "__main__":
    main()
