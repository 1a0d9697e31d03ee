"""The attention mechanisms that the benchmarks compare, each a whole layer with the same four projections.

Every mechanism is a module with `forward(x)` (B x N x embed_dim, projections included) and
`attention(q, k, v)` (B x H x N x d per-head queries, keys and values, projections excluded).

- EVA and block-local attention are fairseq_eva's EVAAttention: block-local attention is EVA with no
  chunks, the paper's "Local" baseline (docs/design.md, "Special cases"), so they share the code.
- softmax: exact attention written out (N x N scores, softmax, weighted sum), as a plain implementation.
- sdpa: exact attention by torch.nn.functional.scaled_dot_product_attention (a fused kernel).
- performer: Performer with positive orthogonal random features (FAVOR+, Choromanski et al. 2021),
  bidirectional, linear in N: the registry's `performer` (fairseq_eva/attention/linear/), as a model uses it.
"""

import torch
import torch.nn.functional as F
from torch import nn

from fairseq_eva.attention import EVAAttention, registry


class ProjectedAttention(nn.Module):
    """q, k, v and output projections around a per-head attention function, as in EVAAttention."""

    def __init__(self, embed_dim, num_heads, attend):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))
        self.attend = attend

    def attention(self, q, k, v):
        return self.attend(q, k, v)

    def forward(self, x):
        B, N, D = x.shape
        projections = (self.q_proj, self.k_proj, self.v_proj)
        q, k, v = (p(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2) for p in projections)
        return self.out_proj(self.attention(q, k, v).transpose(1, 2).reshape(B, N, D))


def softmax_attention(q, k, v, causal=False):
    """Exact attention with the N x N score matrix written out."""
    scores = (q @ k.transpose(-1, -2)) * q.size(-1) ** -0.5
    if causal:
        future = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa_attention(q, k, v, causal=False):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class RegistryLayer(nn.Module):
    """An attention of fairseq_eva's registry (its own layer and projections), with `attention(q, k, v)` too."""

    def __init__(self, name, embed_dim, num_heads, **options):
        super().__init__()
        self.layer = registry.build(name, embed_dim, num_heads, **options)

    def forward(self, x):
        return self.layer(x)

    def attention(self, q, k, v):
        x = q.transpose(1, 2).flatten(2)  # the layer's input stands in for gates a mechanism may compute from it
        return self.layer.attend(x, q, k, v, None)


def eva(embed_dim, num_heads, window=256, chunks=128, use_rpe=False, **options):
    """Bidirectional EVA with abs(E) = window and C = chunks; by default without the relative position bias
    (the "+rpe" rows add the architectures' default trainable bias, "+dropout" the configs' 0.1)."""
    return EVAAttention(embed_dim, num_heads, window_size=window, num_chunks=chunks, use_rpe=use_rpe, **options)


def eva_causal(embed_dim, num_heads, window=128, chunk_size=8, use_rpe=False, **options):
    return EVAAttention(embed_dim, num_heads, causal=True, window_size=window, chunk_size=chunk_size, use_rpe=use_rpe, **options)


def local(embed_dim, num_heads, window=256, causal=False):
    """Block-local attention: EVA without chunks."""
    return EVAAttention(embed_dim, num_heads, causal=causal, window_size=window, use_rpe=False)


# name -> (builder(embed_dim, num_heads), causal): the mechanisms of the speed and memory benchmark
MECHANISMS = {
    "eva": (lambda D, H: eva(D, H), False),
    "eva+rpe": (lambda D, H: eva(D, H, use_rpe=True), False),
    "eva+rpe+dropout": (lambda D, H: eva(D, H, use_rpe=True, dropout=0.1), False),
    "eva-causal": (lambda D, H: eva_causal(D, H), True),
    "eva-causal+rpe": (lambda D, H: eva_causal(D, H, use_rpe=True), True),
    "eva-causal+rpe+dropout": (lambda D, H: eva_causal(D, H, use_rpe=True, dropout=0.1), True),
    "local": (lambda D, H: local(D, H), False),
    "softmax": (lambda D, H: ProjectedAttention(D, H, softmax_attention), False),
    "sdpa": (lambda D, H: ProjectedAttention(D, H, sdpa_attention), False),
    "sdpa-causal": (lambda D, H: ProjectedAttention(D, H, lambda q, k, v: sdpa_attention(q, k, v, True)), True),
    "performer-128": (lambda D, H: RegistryLayer("performer", D, H, num_features=128), False),
    "performer-256": (lambda D, H: RegistryLayer("performer", D, H, num_features=256), False),
}
