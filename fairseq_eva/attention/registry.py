"""The attention mechanisms one can choose: EVA, softmax and the paper's baselines, in one table.

Each entry says how to build the mechanism's module, which directions it supports (bidirectional; causal,
which includes incremental decoding), its options with the paper's defaults and help texts, and its cost: the
multiply-adds per token of one layer's attention, all heads, beyond the four projections, as a function of the
length N, the model width D = H d and its options, so that rows can be compared at equal cost. The fairseq
layers build from this table (`--encoder-attention NAME`, `--decoder-attention NAME`); so do the benchmarks.

Every module follows one contract (base.py): `Module(embed_dim, num_heads, causal=..., dropout=..., **options)`,
`forward(x, key_padding_mask=None, cache=None)` on B x N x embed_dim, and `reorder_cache(cache, order)` where
causal. Its naive float64 reference lives beside it, and its tests check it against that reference.

The entries' types are mechanism.py's; each baseline's module declares its entries (MECHANISMS) and this table
imports them, so that imports run one way (this module -> the baselines -> mechanism.py).
"""

from typing import Optional

from . import combiner, lara, linear, linformer, long_short, reformer
from .mechanism import BIDIRECTIONAL, CAUSAL, Mechanism, Option
from .relative_position import RPE_TYPES

__all__ = ["BIDIRECTIONAL", "CAUSAL", "MECHANISMS", "Mechanism", "Option", "build", "choices", "get", "refusal",
           "register"]

MECHANISMS = {}


def register(*mechanisms: Mechanism):
    for mechanism in mechanisms:
        if mechanism.name in MECHANISMS:
            raise ValueError(f"attention mechanism {mechanism.name!r} registered twice")
        MECHANISMS[mechanism.name] = mechanism


def choices(direction=None):
    """The mechanisms' names (those that support `direction`, if given), in the table's order."""
    return [name for name, m in MECHANISMS.items() if direction is None or direction in m.directions]


def get(name) -> Mechanism:
    if name not in MECHANISMS:
        raise ValueError(f"unknown attention {name!r}; choices: {', '.join(MECHANISMS)}")
    return MECHANISMS[name]


def refusal(name, causal) -> Optional[str]:
    """Why mechanism `name` cannot run in that direction (one line naming the choices that can), or None."""
    mechanism = get(name)
    if mechanism.supports(causal):
        return None
    direction = CAUSAL if causal else BIDIRECTIONAL
    return (f"{name} attention is {' and '.join(mechanism.directions)} only; {direction} choices: "
            f"{', '.join(choices(direction))}")


def build(name, embed_dim, num_heads, causal=False, dropout=0.0, **options):
    """The module of mechanism `name`, with the options not given at their defaults."""
    reason = refusal(name, causal)
    if reason:
        raise ValueError(reason)
    return get(name).build(embed_dim, num_heads, causal=causal, dropout=dropout, **options)


# ---------------------------------------------------------------------- EVA, local and softmax


def softmax_cost(N, embed_dim, num_heads, causal=False):
    """2 N D (N D when causal). q.k and p v over the N keys (N / 2 on average when causal)."""
    return (N if causal else 2 * N) * embed_dim


def eva_cost(N, embed_dim, num_heads, causal=False, window_size=16, overlap=False, num_chunks=0, chunk_size=0, **_):
    """2 (|E| + C) D + 2 D. 2 (|E| + C) D for the joint softmax over the local keys and the chunk summaries,
    about 2 D for the summaries themselves (the proposal's projections are per chunk, negligible). Causal: a
    query sees on average half its block (plus the previous block with overlap), and the chunks before its
    block, N / (2 s) on average. Local attention: C = 0."""
    local = (2 * window_size if overlap else window_size) if not causal else (
        window_size / 2 + (window_size if overlap else 0))
    local = min(local, N)  # a window longer than the sequence holds N keys
    if causal:
        chunks = N / (2 * chunk_size) if chunk_size else 0
    else:
        chunks = min(num_chunks, N) if num_chunks else (N / chunk_size if chunk_size else 0)
    return 2 * (local + chunks) * embed_dim + (2 * embed_dim if chunks else 0)


_EVA_OPTIONS = (
    Option("window_size", int, 256, "size w of the local blocks"),
    Option("overlap", bool, False, "overlapping windows (|E| = 2w)"),
    Option("use_rpe", bool, True, "a learned relative position bias inside the window (of rpe_type)"),
    Option("rpe_type", str, "buckets", "the relative position bias: T5 buckets of the offset, or table: a learned bias "
           "per head, query place and local key place (the authors' masked-LM local attention; w x |E| x H "
           "parameters a layer)", choices=RPE_TYPES),
)

register(
    Mechanism(
        "eva", ".eva:EVAAttention", (BIDIRECTIONAL, CAUSAL),
        (*_EVA_OPTIONS, Option("num_chunks", int, 128, "number C of chunks (bidirectional)"),
         Option("chunk_size", int, 0, "fixed chunk size instead of C (causal: must divide w)")),
        eva_cost, "EVA: exact softmax over a local window plus one control-variate estimate per chunk"),
    Mechanism(
        "softmax", ".softmax:SoftmaxAttention", (BIDIRECTIONAL, CAUSAL), (), softmax_cost,
        "exact softmax attention (in fairseq's layers: fairseq's own MultiheadAttention)"),
    Mechanism(
        "local", ".eva:EVAAttention", (BIDIRECTIONAL, CAUSAL), _EVA_OPTIONS, eva_cost,
        "block-local attention: EVA without chunks (the paper's Local baseline)",
        fixed=(("num_chunks", 0), ("chunk_size", 0))),
)

# The baselines, in the order of the choices: linear attention (performer, rfa, elu, t2r), then as the paper's
# masked-LM table.
register(*linear.MECHANISMS, *lara.MECHANISMS, *linformer.MECHANISMS, *reformer.MECHANISMS, *combiner.MECHANISMS,
         *long_short.MECHANISMS)
