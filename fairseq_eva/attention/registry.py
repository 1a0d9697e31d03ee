"""The attention mechanisms one can choose: EVA, softmax and the paper's baselines, in one table.

Each entry says how to build the mechanism's module, which directions it supports (bidirectional; causal,
which includes incremental decoding), its options with the paper's defaults and help texts, and its cost: the
multiply-adds per token of one layer's attention, all heads, beyond the four projections, as a function of the
length N, the model width D = H d and its options, so that rows can be compared at equal cost. The fairseq
layers build from this table (`--encoder-attention NAME`, `--decoder-attention NAME`); so do the benchmarks.

Every module follows one contract (base.py): `Module(embed_dim, num_heads, causal=..., dropout=..., **options)`,
`forward(x, key_padding_mask=None, cache=None)` on B x N x embed_dim, and `reorder_cache(cache, order)` where
causal. Its naive float64 reference lives beside it, and its tests check it against that reference.

The entries' types are mechanism.py's; each mechanism's module declares its entries (MECHANISMS), EVA's and local
attention's included, and this table imports them, so that imports run one way (this module -> the mechanisms ->
mechanism.py). A mechanism defined elsewhere (a user's, a test's) joins the table with `register`: the fairseq
models then offer it as a choice with its own options.
"""

from typing import Optional

from . import combiner, eva, lara, linear, linformer, long_short, reformer, softmax
from .mechanism import BIDIRECTIONAL, CAUSAL, Mechanism, Memory, Option

__all__ = ["BIDIRECTIONAL", "CAUSAL", "MECHANISMS", "Mechanism", "Memory", "Option", "build", "choices", "get",
           "refusal", "register"]

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


# The table's order is the choices' order: EVA, softmax and local attention, then linear attention (performer,
# rfa, elu, t2r), then the baselines as the paper's masked-LM table lists them.
_eva, _local = eva.MECHANISMS
register(_eva, *softmax.MECHANISMS, _local, *linear.MECHANISMS, *lara.MECHANISMS, *linformer.MECHANISMS,
         *reformer.MECHANISMS, *combiner.MECHANISMS, *long_short.MECHANISMS)
