"""Exact softmax attention on the registry's contract (base.py): the quadratic baseline every mechanism is
compared with, outside fairseq (fairseq's layers use fairseq's own MultiheadAttention for `softmax`)."""

import torch
import torch.nn.functional as F

from .base import ProjectedAttention, key_mask
from .layout import additive_mask
from .mechanism import BIDIRECTIONAL, CAUSAL, Mechanism


class SoftmaxAttention(ProjectedAttention):
    """softmax(q k^T / sqrt(d)) v over every real key (and, when causal, none after the query)."""

    def attend(self, x, q, k, v, lengths):
        N = q.size(2)
        hidden = None
        real = key_mask(lengths, N, q.device)
        if real is not None:
            hidden = ~real[:, None, None, :]  # B x 1 x 1 x N
        if self.causal:
            future = torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
            hidden = future if hidden is None else hidden | future
        bias = None if hidden is None else additive_mask(hidden, q.dtype)
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p, scale=self.scale)

    def step(self, x, q, k, v, cache):
        if "k" in cache:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        cache["k"], cache["v"] = k, v
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, scale=self.scale)


def reference(q, k, v, causal=False, real=None):
    """Per-query float64 softmax attention: q, k, v B x H x N x d; real: B x N, True at real keys."""
    q, k, v = (t.double() for t in (q, k, v))
    B, H, N, d = q.shape
    out = torch.zeros_like(q)
    for n in range(N):
        logits = (k @ q[:, :, n, :, None]).squeeze(-1) / d**0.5  # B x H x N
        visible = torch.ones(B, 1, N, dtype=torch.bool)
        if real is not None:
            visible = visible & real[:, None, :]
        if causal:
            visible[..., n + 1 :] = False
        p = torch.softmax(logits.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
        out[:, :, n] = (p[..., None] * v).sum(2)
    return out


def softmax_cost(N, embed_dim, num_heads, causal=False):
    """2 N D (N D when causal). q.k and p v over the N keys (N / 2 on average when causal)."""
    return (N if causal else 2 * N) * embed_dim


MECHANISMS = (Mechanism(
    "softmax", ".softmax:SoftmaxAttention", (BIDIRECTIONAL, CAUSAL), (), softmax_cost,
    "exact softmax attention (in fairseq's layers: fairseq's own MultiheadAttention)", title="softmax"),)
