"""Transformer-LS, long-short attention (Zhu et al. 2021), bidirectional, with non-overlapping local blocks.

Long branch: a dynamic projection of the layer input X onto r landmarks per head,

    P_h = softmax over the row's real positions of X W^P_h   (W^P in R^{D x H r}),
    K~_h = P_h^T K_h,   V~_h = P_h^T V_h                      (r rows per head);

short branch: the keys of the query's block of w. One softmax over [K~_h ; block keys]. DualLN: one LayerNorm on
the local K and V, LN_L, another on K~ and V~, LN_G, each over the model width D = H d (NVIDIA's code; the paper
writes them per head), so that the two kinds of keys are on one scale. The two sources order them differently
(`dual_ln_order`):

    norm_first:     K~ = LN_G(P^T LN_L(K))   (NVIDIA's code, in each of its tasks: the landmarks mix the
                                               normalised local keys);
    project_first:  K~ = LN_G(P^T K)         (the paper's equations: the landmarks mix the raw keys),

and V~ likewise; the local keys are LN_L(K) in both. The joint softmax is EVA's kernel (joint_softmax.py) with
K~, V~ as every block's summaries.
"""


import torch
from torch import nn

from .base import ProjectedAttention
from .chunks import upcast
from .joint_softmax import joint_softmax, pad_to_blocks
from .layout import lowest
from .mechanism import BIDIRECTIONAL, Mechanism, Memory, Option
from .relative_position import RelativePositionBias

DUAL_LN_ORDERS = ("norm_first", "project_first")


def long_short_cost(N, embed_dim, num_heads, causal=False, window_size=256, num_landmarks=128, **_):
    """2 (w + r) D + H r D + 2 r D, w at most N. A query sees w block keys and r landmarks in the joint softmax; the
    landmarks cost per token X W^P (H r D) and its share of P^T K and P^T V (r d per head each: 2 r D). The
    LayerNorms are not counted."""
    return 2 * (min(window_size, N) + num_landmarks) * embed_dim + (num_heads + 2) * num_landmarks * embed_dim


def _layer_norm(norm, t):
    """norm (a LayerNorm over H d) of each position of t, B x H x L x d, over all its heads."""
    B, H, L, d = t.shape
    return norm(t.transpose(1, 2).reshape(B, L, H * d)).view(B, L, H, d).transpose(1, 2)


class LongShortAttention(ProjectedAttention):
    """Transformer-LS: exact softmax over the query's block of w keys and r dynamic landmarks per head, jointly.

    window_size: w; num_landmarks: r (0: block-local attention only); dual_ln: the two LayerNorms (off: the raw
    keys and values); dual_ln_order: whether P mixes the LN_L-ed or the raw keys and values (the module's
    docstring); use_rpe: a learned relative position bias (T5 buckets, as EVA's and the local attention's)
    on the logits inside the block. W^P has no bias: a constant over positions cancels in P's softmax.
    Attention dropout applies to the joint softmax's probabilities (not to P)."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, window_size=256, num_landmarks=128,
                 dual_ln=True, dual_ln_order="norm_first", use_rpe=True):
        if causal:
            raise ValueError("long_short attention is bidirectional only")
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size < 1:
            raise ValueError(f"window_size must be a positive integer, got {window_size!r}")
        if not isinstance(num_landmarks, int) or isinstance(num_landmarks, bool) or num_landmarks < 0:
            raise ValueError(f"num_landmarks must be an integer >= 0, got {num_landmarks!r}")
        for name, value in (("dual_ln", dual_ln), ("use_rpe", use_rpe)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}")
        if dual_ln_order not in DUAL_LN_ORDERS:
            raise ValueError(f"dual_ln_order must be one of {', '.join(DUAL_LN_ORDERS)}; got {dual_ln_order!r}")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.window_size, self.num_landmarks, self.dual_ln_order = window_size, num_landmarks, dual_ln_order
        self.landmarks = nn.Linear(embed_dim, num_heads * num_landmarks, bias=False) if num_landmarks else None
        self.local_norm = nn.LayerNorm(embed_dim) if dual_ln else None
        self.landmark_norm = nn.LayerNorm(embed_dim) if dual_ln and num_landmarks else None
        self.rpe = RelativePositionBias(num_heads, bidirectional=True) if use_rpe else None

    def extra_repr(self):
        return (f"window_size={self.window_size}, num_landmarks={self.num_landmarks}, "
                f"dual_ln={self.local_norm is not None}, dual_ln_order={self.dual_ln_order}, "
                f"use_rpe={self.rpe is not None}")

    def attend(self, x, q, k, v, lengths):
        B, H, N, d = q.shape
        raw_k, raw_v = k, v
        if self.local_norm is not None:
            k, v = _layer_norm(self.local_norm, k), _layer_norm(self.local_norm, v)
        k_summary = beta = chunk_ok = None
        if self.landmarks is not None:
            mixed = (raw_k, raw_v) if self.dual_ln_order == "project_first" else (k, v)
            k_summary, beta = self.dynamic_projection(x, *mixed, lengths)
            if lengths is not None:  # a row without a real token has no landmarks
                chunk_ok = (lengths > 0)[:, None].expand(B, self.num_landmarks)
        w = min(self.window_size, N)  # a window longer than the sequence is one block of N: the same biases
        if N % w and lengths is None:  # the positions padding the last block are hidden
            lengths = torch.full((B,), N, device=q.device)
        q, k, v = (pad_to_blocks(t, w) for t in (q, k, v))
        return joint_softmax(self, q, k, v, w, k_summary, beta, chunk_ok, lengths, self.rpe)[:, :, :N]

    def dynamic_projection(self, x, k, v, lengths):
        """K~, V~ (B x H x r x d): P^T K and P^T V, P the softmax over the real positions of X W^P (then LN)."""
        B, H, N, d = k.shape
        logits = upcast(self.landmarks(x))  # B x N x H r
        if lengths is not None:
            pads = torch.arange(N, device=x.device)[None, :] >= lengths[:, None]
            logits = logits.masked_fill(pads[..., None], lowest(logits.dtype))
        P = torch.softmax(logits, dim=1).to(k.dtype).view(B, N, H, -1).permute(0, 2, 3, 1)  # B x H x r x N
        k_summary, beta = P @ k, P @ v
        if self.landmark_norm is not None:
            k_summary, beta = _layer_norm(self.landmark_norm, k_summary), _layer_norm(self.landmark_norm, beta)
        return k_summary, beta


def _ln(t, norm):
    """LayerNorm over the last dimension, written out; norm: (weight, bias, eps)."""
    weight, bias, eps = norm
    centred = t - t.mean(-1, keepdim=True)
    return centred / (centred.square().mean(-1, keepdim=True) + eps).sqrt() * weight + bias


@torch.no_grad()
def reference(x, q, k, v, window, real=None, landmarks=None, local_norm=None, landmark_norm=None, rpe=None,
              dual_ln_order="norm_first"):
    """Per-query float64 Transformer-LS: x B x N x D, q, k, v B x H x N x d (real tokens first); real: B x N, True at
    real tokens; landmarks: W^P, D x H r (None: no landmarks); local_norm, landmark_norm: (weight, bias, eps) of the
    LayerNorms over D (None: off); rpe: bias(relative position) -> H-vector, or None; dual_ln_order: norm_first,
    K~ = LN_G(P^T LN_L(K)), or project_first, K~ = LN_G(P^T K) (V~ likewise)."""
    x, q, k, v = (t.double() for t in (x, q, k, v))
    B, H, N, d = q.shape
    real = torch.ones(B, N, dtype=torch.bool) if real is None else real
    out = torch.zeros_like(q)
    for b in range(B):
        K, V = k[b].transpose(0, 1).reshape(N, H * d), v[b].transpose(0, 1).reshape(N, H * d)  # N x D
        K_p, V_p = K.view(N, H, d), V.view(N, H, d)  # what P mixes, project_first: the raw keys and values
        if local_norm is not None:
            K, V = _ln(K, local_norm), _ln(V, local_norm)
        K, V = K.view(N, H, d), V.view(N, H, d)
        if dual_ln_order == "norm_first":
            K_p, V_p = K, V
        r = 0 if landmarks is None else landmarks.size(1) // H
        if r:
            scores = (x[b] @ landmarks.double()).view(N, H, r)
            P = torch.softmax(scores.masked_fill(~real[b, :, None, None], float("-inf")), dim=0)  # over positions
            K_r, V_r = torch.einsum("nhl,nhe->lhe", P, K_p), torch.einsum("nhl,nhe->lhe", P, V_p)  # r x H x d
            if landmark_norm is not None:
                K_r = _ln(K_r.reshape(r, H * d), landmark_norm).view(r, H, d)
                V_r = _ln(V_r.reshape(r, H * d), landmark_norm).view(r, H, d)
        for i in range(N):
            if not real[b, i]:
                continue
            block = [j for j in range(i - i % window, min(i - i % window + window, N)) if real[b, j]]
            for h in range(H):
                bias = [0.0 if rpe is None else float(rpe(torch.tensor(j - i))[h]) for j in block]
                logits = [q[b, h, i] @ K[j, h] / d**0.5 + c for j, c in zip(block, bias)]
                logits += [q[b, h, i] @ K_r[m, h] / d**0.5 for m in range(r)]
                values = [V[j, h] for j in block] + [V_r[m, h] for m in range(r)]
                p = torch.softmax(torch.stack(logits), 0)
                out[b, h, i] = (p[:, None] * torch.stack(values)).sum(0)
    return out


MECHANISMS = (Mechanism(
    "long_short", ".long_short:LongShortAttention", (BIDIRECTIONAL,),
    (Option("window_size", int, 256, "size w of the non-overlapping local blocks (the paper's masked LM: 256)"),
     Option("num_landmarks", int, 128, "number r of dynamic-projection landmarks per head, the long branch (the "
            "paper's masked LM: 128; 0: block-local attention only)"),
     Option("dual_ln", bool, True, "DualLN: one LayerNorm on the local keys and values, another on the landmark "
            "keys and values"),
     Option("dual_ln_order", str, "norm_first", "DualLN's order: norm_first, the landmarks mix the normalised "
            "local keys and values, LN_G(P^T LN_L(K)) (NVIDIA's code); project_first, the raw ones, LN_G(P^T K) "
            "(the Transformer-LS paper's equations)", DUAL_LN_ORDERS),
     Option("use_rpe", bool, True, "a learned relative position bias (T5 buckets) inside the block")),
    long_short_cost, "Transformer-LS: exact softmax over a local block and r dynamic landmarks per head, jointly",
    title="Transformer-LS", knob="num_landmarks",
    memory=Memory(("num_landmarks",), lambda B, N, H, d, o: B * H * N * (min(N, o["window_size"]) + o["num_landmarks"]),
                  4),
),)
