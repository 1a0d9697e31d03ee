"""What every attention mechanism of the registry shares: the four projections and the padding layout.

A mechanism subclasses `ProjectedAttention` and writes only its attention over per-head q, k, v:

    attend(x, q, k, v, lengths) -> B x H x N x d     (the whole sequence; real tokens first)
    step(x, q, k, v, cache)     -> B x H x 1 x d     (causal mechanisms: one token of incremental decoding)

Before `attend`, each row's real tokens are moved to its front (fairseq left-pads sources), so a mechanism that
ties anything to positions (blocks, spans, chunks, learned length projections) lays the sequence out from its
first real token and its output does not depend on the padding or the batch; `lengths` (B, int) are the rows'
numbers of real tokens, None when there are no pads. Pad positions return zeros before the output projection.
`x` is the layer's input in the same order (Transformer-LS projects it; the others ignore it).
"""

import math
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from .layout import tensor_cache

Cache = Dict[str, Tensor]


class ProjectedAttention(nn.Module):
    """Multi-head self-attention with fairseq-style q/k/v/out projections around `attend` (and `step`)."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, bias=True, projections=("q", "k", "v")):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim**-0.5
        self.causal = causal
        self.dropout = nn.Dropout(dropout)
        self.projections = projections
        for name in projections:
            setattr(self, f"{name}_proj", nn.Linear(embed_dim, embed_dim, bias=bias))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.build_before_reset()
        self.reset_projections()

    def build_before_reset(self):
        """A mechanism's own modules that are drawn between the projections' construction and their initialisation
        (EVA's summaries and bias, whose draws keep that place so that a seed gives the models it gave before);
        the others build theirs after __init__."""

    def reset_projections(self):
        # as fairseq's MultiheadAttention
        for name in self.projections:
            nn.init.xavier_uniform_(getattr(self, f"{name}_proj").weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def split_heads(self, t):
        B, N, _ = t.shape
        return t.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)

    def project(self, x):
        """Per-head q, k, v (B x H x N x d) of x; a mechanism without a k projection (shared QK) gets k = None."""
        return tuple(self.split_heads(getattr(self, f"{n}_proj")(x)) if n in self.projections else None
                     for n in ("q", "k", "v"))

    def forward(self, x: Tensor, key_padding_mask: Optional[Tensor] = None, cache: Optional[Cache] = None):
        """x: B x N x embed_dim; key_padding_mask: B x N, True at pads; cache: incremental decoding state."""
        B, N, _ = x.shape
        if cache is not None:
            if not self.causal:
                raise ValueError(f"incremental decoding (a cache) needs a causal {type(self).__name__}")
            if key_padding_mask is not None and key_padding_mask.any():
                raise ValueError("pads among incrementally decoded tokens are not supported")
            steps = []
            for t in range(N):
                xt = x[:, t : t + 1]
                steps.append(self.step(xt, *self.project(xt), cache).transpose(1, 2).reshape(B, 1, self.embed_dim))
            return self.out_proj(torch.cat(steps, dim=1))
        lengths = order = is_pad = None
        if key_padding_mask is not None:
            if key_padding_mask.shape != (B, N):
                raise ValueError(f"key_padding_mask must be B x N = {(B, N)}, got {tuple(key_padding_mask.shape)}")
            order, lengths, is_pad = padding_order(key_padding_mask)
            x = x.gather(1, order.unsqueeze(-1).expand_as(x))
        y = self.attend(x, *self.project(x), lengths).transpose(1, 2).reshape(B, N, self.embed_dim)
        if lengths is not None:
            y = y.masked_fill(is_pad, 0)
            y = torch.zeros_like(y).scatter(1, order.unsqueeze(-1).expand_as(y), y)
        return self.out_proj(y)

    def attend(self, x, q, k, v, lengths):
        raise NotImplementedError

    def step(self, x, q, k, v, cache: Cache):
        raise NotImplementedError(f"{type(self).__name__} has no incremental decoding")

    @staticmethod
    def reorder_cache(cache: Cache, new_order: Tensor):
        """Select the batch rows of the cache (beam search)."""
        for name, value in cache.items():
            cache[name] = value.index_select(0, new_order)
        return cache


def key_mask(lengths, N, device):
    """B x N, True at the real keys (the first lengths[b] positions), or None without lengths."""
    if lengths is None:
        return None
    return torch.arange(N, device=device)[None, :] < lengths[:, None]


@tensor_cache
def padding_order(key_padding_mask):
    """(order, lengths, is_pad) of a B x N padding mask: the permutation that puts each row's real tokens first
    (B x N), the rows' numbers of real tokens (B, int32), and the pad positions after it (B x N x 1)."""
    pad = key_padding_mask.to(torch.bool)
    order = torch.sort(pad.to(torch.int8), dim=1, stable=True).indices  # real tokens first
    lengths = pad.size(1) - pad.sum(1, dtype=torch.int32)
    is_pad = torch.arange(pad.size(1), device=pad.device)[None, :, None] >= lengths[:, None, None]
    return order, lengths, is_pad
