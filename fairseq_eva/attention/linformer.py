"""Linformer (Wang, Li, Khabsa, Fang, Ma 2020): softmax attention over k learned mixtures of the positions.

    K~ = E K,  V~ = F V   (E, F in R^{k x N_max}, learned; a sequence of N <= N_max uses their first N columns)
    y_n = sum_j softmax_j( q_n . K~_j / sqrt(d) ) V~_j

Bidirectional only: each projected key mixes every position. The projections are tied to positions, so each
row is laid out from its first real token (the base class puts real tokens first) and the pads' keys and
values are zeroed before projecting: a pad column of E or F gets no weight, and a row's outputs are those it
gets alone, whatever the padding. fairseq's Linformer example neither masks pads nor re-aligns left-padded rows.

Sharing (the Linformer paper, section 4): "headwise" (default) is one E and one F per layer, shared by its heads,
as fairseq's Linformer example; "kv" one E = F per layer; "none" one E and one F per head. The paper's
"layerwise" sharing (one E = F for all layers) is not offered: each layer builds its own module. The EVA
paper's parameter count (Linformer 129M against 126M for softmax, masked LM at N = 2048) matches none of
these (one k x N matrix is 0.52M: headwise 12.6M, kv 6.3M, layerwise 0.5M over 12 layers), so it does not
settle which sharing was used.
"""

import math

import torch
from torch import nn

from .base import ProjectedAttention, key_mask
from .mechanism import BIDIRECTIONAL, Mechanism, Memory, Option

SHARING = ("headwise", "kv", "none")


class LinformerAttention(ProjectedAttention):
    """Softmax attention of every query over `projected_dim` learned length-projections of the keys and values."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, projected_dim=256, max_positions=2048,
                 sharing="headwise"):
        for name, value in (("projected_dim", projected_dim), ("max_positions", max_positions)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if sharing not in SHARING:
            raise ValueError(f"sharing must be one of {', '.join(SHARING)}, got {sharing!r}")
        if causal:
            raise ValueError("linformer attention is bidirectional only (each projected key mixes every position)")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.projected_dim, self.max_positions, self.sharing = projected_dim, max_positions, sharing
        groups = num_heads if sharing == "none" else 1
        self.E = nn.Parameter(torch.empty(groups, projected_dim, max_positions))
        self.F = None if sharing == "kv" else nn.Parameter(torch.empty(groups, projected_dim, max_positions))
        self.reset_length_projections()

    def reset_length_projections(self):
        # xavier-uniform with gain 1/sqrt(2) on each k x N_max matrix, as fairseq's Linformer example
        bound = math.sqrt(3 / (self.projected_dim + self.max_positions))
        for weight in (self.E, self.F):
            if weight is not None:
                nn.init.uniform_(weight, -bound, bound)

    def length_projections(self):
        """(E, F), with F = E under kv sharing: G x k x N_max each."""
        return self.E, self.E if self.F is None else self.F

    def extra_repr(self):
        return f"projected_dim={self.projected_dim}, max_positions={self.max_positions}, sharing={self.sharing}"

    def attend(self, x, q, k, v, lengths):
        N = q.size(2)
        if N > self.max_positions:
            raise ValueError(f"linformer attention: the sequence has {N} positions, more than max_positions "
                             f"({self.max_positions}), the number of columns of its learned projections E, F; "
                             "set max_positions to the longest sequence")
        real = key_mask(lengths, N, q.device)
        if real is not None:
            hidden = ~real[:, None, :, None]
            k, v = k.masked_fill(hidden, 0), v.masked_fill(hidden, 0)
        E, F = self.length_projections()
        # G x k x N with G = 1 (shared by the heads) or H, broadcast over B x H
        k_bar = E[..., :N] @ k  # B x H x k x d
        v_bar = F[..., :N] @ v
        p = torch.softmax((q @ k_bar.transpose(-1, -2)) * self.scale, dim=-1)
        return self.dropout(p) @ v_bar


def reference(q, k, v, E, F, real=None):
    """Per-query float64 Linformer: q, k, v B x H x N x d (pads anywhere); E, F G x k x N_max (G = 1 or H);
    real: B x N, True at real tokens, which take E's columns 0, 1, ... in their order."""
    q, k, v, E, F = (t.double() for t in (q, k, v, E, F))
    B, H, N, d = q.shape
    out = torch.zeros_like(q)
    for b in range(B):
        positions = [n for n in range(N) if real is None or bool(real[b, n])]
        for h in range(H):
            e, f = E[h % E.size(0)], F[h % F.size(0)]
            k_bar = sum(e[:, col, None] * k[b, h, n][None, :] for col, n in enumerate(positions))
            v_bar = sum(f[:, col, None] * v[b, h, n][None, :] for col, n in enumerate(positions))
            if not positions:
                k_bar = v_bar = torch.zeros(E.size(1), d, dtype=torch.float64)
            for n in range(N):
                weights = torch.softmax(k_bar @ q[b, h, n] / math.sqrt(d), dim=0)
                out[b, h, n] = weights @ v_bar
    return out


def linformer_cost(N, embed_dim, num_heads, causal=False, projected_dim=256, **_):
    """4 k D. Per token, 2 k D for q.K~ and p V~ over the k projected keys, and 2 k D for its share of E K and
    F V (each position's key and value enter k projected rows): independent of N."""
    return 4 * projected_dim * embed_dim


MECHANISMS = (
    Mechanism(
        "linformer", ".linformer:LinformerAttention", (BIDIRECTIONAL,),
        (Option("projected_dim", int, 256, "projected length k: the number of learned mixtures of the positions "
                                           "that every query attends (the paper's masked LM: 256)"),
         Option("max_positions", int, 2048, "the longest sequence N_max: E and F have one column per position "
                                            "(the paper's masked LM: 2048 or 4096)"),
         Option("sharing", str, "headwise", "headwise: one E and one F per layer shared by its heads; kv: one "
                                            "E = F per layer; none: one E and one F per head", SHARING)),
        linformer_cost,
        "Linformer: softmax attention over k learned length-projections of the keys and values",
        title="Linformer", knob="projected_dim",
        memory=Memory(("projected_dim",), lambda B, N, H, d, o: B * H * N * o["projected_dim"], 3)),  # the logits
)
