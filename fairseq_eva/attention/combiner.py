"""Combiner-Fixed with DeepSets-Max abstractions (Ren et al. 2021, eqs. 7, 9, 10), bidirectional.

The sequence is cut into spans of s from each row's first real token. A query attends to its own span's keys
directly and to every other span r through one abstraction (k~_r, v~_r), all in one softmax:

    y_i = [ sum_{j in own} e^{s(q_i, k_j)} v_j + sum_{r != own} e^{s(q_i, k~_r)} v~_r ] / Z_i,
    k~_r = max_{j in r} MLP_k(k_j),   q~_r = max_{j in r} MLP_q(q_j),   v~_r = sum_{j in r} softmax_j(s(q~_r, k_j)) v_j,

s(q, k) = q.k / sqrt(d), MLP = ReLU o Linear(d, d) shared by the heads (abstraction "deepsets-max"), or the
identity ("max": plain max-pooling). So a query's weights on the keys of another span are p_i(r) times one
distribution shared by every query (rank-1 blocks of the attention matrix); its own span is never summarised.
Pads enter no max-pool or sum, and a span without a real token is not shown. The joint softmax is EVA's kernel
(joint_softmax.py) with the spans as blocks, each block its own batch row so that it can hide its own summary.
"""

import math

import torch
from torch import nn

from .base import ProjectedAttention
from .chunks import upcast
from .joint_softmax import joint_softmax, pad_to_blocks
from .layout import lowest
from .mechanism import BIDIRECTIONAL, Mechanism, Option
from .relative_position import RPE_TYPES, PlaceBias, RelativePositionBias

ABSTRACTIONS = ("deepsets-max", "max")


def combiner_cost(N, embed_dim, num_heads, causal=False, span=256, abstraction="deepsets-max", **_):
    """2 (s + N/s - 1) D + 2 D + 2 d D (2 (s + N/s - 1) D + 2 D with max-pooling). A query sees the s keys of its span
    and N/s - 1 abstractions in the joint softmax; the abstractions cost per token q~.k_j and the weighted sum of
    v_j (2 D), and DeepSets-Max one Linear(d, d) on each head's q and k (2 d D). A span longer than N is one span of
    N: plain softmax, 2 N D, no abstraction."""
    local, spans = min(span, N), math.ceil(N / span)
    if spans == 1:
        return 2 * local * embed_dim
    mlp = 2 * (embed_dim // num_heads) * embed_dim if abstraction == "deepsets-max" else 0
    return 2 * (local + spans - 1) * embed_dim + 2 * embed_dim + mlp


class CombinerAttention(ProjectedAttention):
    """Combiner-Fixed: exact softmax inside the span, one DeepSets-Max abstraction per other span.

    span: s, the span length; abstraction: "deepsets-max" (max over ReLU(Linear(d, d)) of q and of k, one
    Linear each, shared by the heads) or "max" (max-pooling, no parameters); use_rpe: a learned relative
    position bias on the logits inside the span, of rpe_type: "buckets" (T5 buckets of the offset, as EVA's) or
    "table" (one bias per head, query place and key place in the span, H x s x s: the authors' local attention
    bias, which the paper's parameter count shows in its masked-LM Combiner; a sequence shorter than the span is
    then padded to one span). Attention dropout applies to the joint softmax's probabilities."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, span=256, abstraction="deepsets-max",
                 use_rpe=True, rpe_type="buckets"):
        if causal:
            raise ValueError("combiner attention is bidirectional only")
        if not isinstance(span, int) or isinstance(span, bool) or span < 1:
            raise ValueError(f"span must be a positive integer, got {span!r}")
        if abstraction not in ABSTRACTIONS:
            raise ValueError(f"abstraction must be one of {', '.join(ABSTRACTIONS)}; got {abstraction!r}")
        if not isinstance(use_rpe, bool):
            raise ValueError(f"use_rpe must be true or false, got {use_rpe!r}")
        if rpe_type not in RPE_TYPES:
            raise ValueError(f"rpe_type must be one of {', '.join(RPE_TYPES)}; got {rpe_type!r}")
        if rpe_type == "table" and not use_rpe:
            raise ValueError("rpe_type table is a bias inside the span: it needs use_rpe true")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.span, self.abstraction = span, abstraction
        d = self.head_dim
        self.q_abstraction = self.k_abstraction = None
        if abstraction == "deepsets-max":
            self.q_abstraction = nn.Sequential(nn.Linear(d, d), nn.ReLU())
            self.k_abstraction = nn.Sequential(nn.Linear(d, d), nn.ReLU())
        self.rpe = None
        if use_rpe:
            self.rpe = PlaceBias(num_heads, span, span) if rpe_type == "table" else RelativePositionBias(
                num_heads, bidirectional=True)

    def extra_repr(self):
        kind = "table" if isinstance(self.rpe, PlaceBias) else "buckets"
        return f"span={self.span}, abstraction={self.abstraction}, use_rpe={self.rpe is not None}, rpe_type={kind}"

    def attend(self, x, q, k, v, lengths):
        B, H, N, d = q.shape
        # a span longer than the sequence is one span of N (the same biases by offset, no padding); a table by place
        # is the span's, so the sequence is padded to it
        s = self.span if isinstance(self.rpe, PlaceBias) else min(self.span, N)
        nb = math.ceil(N / s)
        q, k, v = (pad_to_blocks(t, s) for t in (q, k, v))
        if lengths is None:
            lengths = torch.full((B,), N, device=q.device)
        starts = torch.arange(nb, device=q.device) * s
        k_summary = beta = chunk_ok = None
        if nb > 1:
            real = (torch.arange(nb * s, device=q.device) < lengths[:, None]).view(B, 1, nb, s, 1)
            k_tilde, v_tilde = self.abstractions(q, k, v, real)  # B x H x nb x d
            # block b sees the spans holding a real token, except its own
            shown = (starts < lengths[:, None])[:, None, :] & ~torch.eye(nb, dtype=torch.bool, device=q.device)
            chunk_ok = shown.flatten(0, 1)  # (B nb) x nb
            k_summary, beta = (t[:, None].expand(B, nb, H, nb, d).flatten(0, 1) for t in (k_tilde, v_tilde))
        # each span a batch row of one block, so that every block has its own chunk_ok
        q, k, v = (t.transpose(1, 2).reshape(B * nb, s, H, d).transpose(1, 2) for t in (q, k, v))
        span_lengths = (lengths[:, None] - starts).clamp(0, s).flatten()
        y = joint_softmax(self, q, k, v, s, k_summary, beta, chunk_ok, span_lengths, self.rpe)
        return y.transpose(1, 2).reshape(B, nb * s, H, d)[:, :N].transpose(1, 2)

    def abstractions(self, q, k, v, real):
        """k~_r and v~_r (B x H x nb x d) of every span; real: B x 1 x nb x s x 1, True at real tokens. A span
        without a real token gets zeros (it is hidden)."""
        B, H, Np, d = q.shape
        nb = real.size(2)
        spans = [t.reshape(B, H, nb, -1, d) for t in (q, k, v)]
        phi_q, phi_k = spans[:2]
        if self.abstraction == "deepsets-max":
            phi_q, phi_k = self.q_abstraction(phi_q), self.k_abstraction(phi_k)
        some = real.any(3)  # B x 1 x nb x 1
        q_tilde, k_tilde = (t.masked_fill(~real, float("-inf")).amax(3).where(some, 0.0) for t in (phi_q, phi_k))
        logits = (spans[1] @ q_tilde.unsqueeze(-1)).squeeze(-1) * self.scale  # B x H x nb x s
        logits = upcast(logits)
        weights = torch.softmax(logits.masked_fill(~real[..., 0], lowest(logits.dtype)), -1).to(v.dtype)
        v_tilde = (weights.unsqueeze(-2) @ spans[2]).squeeze(-2)
        return k_tilde, v_tilde


@torch.no_grad()
def reference(q, k, v, span, real=None, q_mlp=None, k_mlp=None, rpe=None, place_bias=None):
    """Per-query float64 Combiner-Fixed: q, k, v B x H x N x d (real tokens first); real: B x N, True at real
    tokens; q_mlp, k_mlp: the DeepSets maps (None: plain max-pooling); rpe: bias(relative position) -> H-vector or
    None; place_bias: H x span x span, the bias of (query place, key place) in their span, or None. Each query's
    row of the attention matrix A is built (its own span's keys one by one, every other span as one abstraction
    spread over its keys), and y = A v."""
    q, k, v = (t.double() for t in (q, k, v))
    B, H, N, d = q.shape
    real = torch.ones(B, N, dtype=torch.bool) if real is None else real
    y = torch.zeros_like(q)
    for b in range(B):
        spans = [[j for j in range(r, min(r + span, N)) if real[b, j]] for r in range(0, N, span)]
        for h in range(H):
            abstractions = {}  # span index -> (k~_r, the span's inner distribution as a row of N)
            for r, members in enumerate(spans):
                if members:
                    phi_q = torch.stack([q[b, h, j] if q_mlp is None else q_mlp(q[b, h, j]) for j in members])
                    phi_k = torch.stack([k[b, h, j] if k_mlp is None else k_mlp(k[b, h, j]) for j in members])
                    q_r, k_r = phi_q.amax(0), phi_k.amax(0)
                    row = q.new_zeros(N)
                    row[members] = torch.softmax(torch.stack([q_r @ k[b, h, j] / d**0.5 for j in members]), 0)
                    abstractions[r] = (k_r, row)
            for r_own, own in enumerate(spans):
                for i in own:
                    logits, rows = [], []  # one logit, and its row of A, per own key and per other span
                    for j in own:
                        bias = 0.0 if rpe is None else float(rpe(torch.tensor(j - i))[h])
                        if place_bias is not None:
                            bias += float(place_bias[h, i - r_own * span, j - r_own * span])
                        logits.append(q[b, h, i] @ k[b, h, j] / d**0.5 + bias)
                        rows.append(torch.nn.functional.one_hot(torch.tensor(j), N).double())
                    for r, (k_r, row) in abstractions.items():
                        if r != r_own:
                            logits.append(q[b, h, i] @ k_r / d**0.5)
                            rows.append(row)
                    p = torch.softmax(torch.stack(logits), 0)
                    y[b, h, i] = (p[:, None] * torch.stack(rows)).sum(0) @ v[b, h]
    return y


MECHANISMS = (Mechanism(
    "combiner", ".combiner:CombinerAttention", (BIDIRECTIONAL,),
    (Option("span", int, 256, "span length s: exact attention inside a span, one abstraction per other span (the "
            "paper's masked LM: 256)"),
     Option("abstraction", str, "deepsets-max", "how a span is summarised: deepsets-max (max over ReLU(Linear(d, d)) "
            "of q and of k, the paper's) or max (max-pooling, no parameters)", choices=ABSTRACTIONS),
     Option("use_rpe", bool, True, "a learned relative position bias inside the span, of rpe_type"),
     Option("rpe_type", str, "buckets", "the bias: T5 buckets of the offset, or table: a learned bias per head, "
            "query place and key place in the span (the authors' local attention bias; H x s x s parameters a "
            "layer)", choices=RPE_TYPES)),
    combiner_cost, "Combiner-Fixed: exact softmax inside a span, a DeepSets-Max abstraction of every other span",
    title="Combiner", knob="span",
),)
