"""EVA's layer as docs/design.md, "What EVA computes", reads it: one sequence, query by query, in whatever
dtype the layer has (float64 in the tests). Slow and plain: the definition every kernel, through the layer,
is tested against. kernels/reference.py is the same for the kernel contract alone."""

import math

import torch

from .relative_position import PlaceBias


def qkv(mod, x):
    """Per-head queries, keys, values from the module's projections: each B x H x N x d."""
    B, N, _ = x.shape
    H, d = mod.num_heads, mod.head_dim
    return [p(x).view(B, N, H, d).transpose(1, 2) for p in (mod.q_proj, mod.k_proj, mod.v_proj)]


def merge(mod, y):
    """B x H x N x d per-head outputs -> output projection."""
    B, H, N, d = y.shape
    return mod.out_proj(y.transpose(1, 2).reshape(B, N, H * d))


def window_start(mod, n):
    """Where n's local window begins (w / 2 before its block with bidirectional overlap, w causal; perhaps before
    the sequence): a local key's place is its distance from there."""
    w = mod.window_size
    start = (n // w) * w
    return start - ((w if mod.causal else w // 2) if mod.overlap else 0)


def local_set(mod, n, L):
    """E^n for query n of a sequence of L real tokens (docs/design.md, "Blocks and chunks")."""
    w = mod.window_size
    if w == 0:
        return []
    first = window_start(mod, n)
    if mod.causal:
        return list(range(max(0, first), n + 1))
    return [m for m in range(first, first + (2 * w if mod.overlap else w)) if 0 <= m < L]


def reference_eva(mod, x, noise=None, chunk_logit_offset=0.0):
    """The output of EVAAttention `mod` for one sequence x (L x embed, all real), looping over queries.

    noise(c) gives eps of chunk c (H x d) in training; None means evaluation (omega = mu). No attention dropout.
    chunk_logit_offset: added to every chunk logit (what the layer's option of that name stands for).
    """
    L = x.size(0)
    d = mod.head_dim
    q, k, v = (t[0] for t in qkv(mod, x[None]))  # H x L x d
    scale = 1 / math.sqrt(d)
    if mod.causal:
        size = mod.chunk_size
    else:
        size = mod.chunk_size or (math.ceil(L / mod.num_chunks) if mod.num_chunks else 0)
    chunks = [list(range(a, min(a + size, L))) for a in range(0, L, size)] if size else []
    summaries = []  # (positions, k~_c, beta_c)
    for c, P in enumerate(chunks):
        k_sum = mod.chunks.sigma_k(k[:, P].mean(1))  # H x d
        omega = mod.chunks.sigma_q(q[:, P].mean(1)) + k_sum
        if mod.chunks.proposal_mean == "average":
            omega = omega / 2
        if noise is not None:
            omega = omega + noise(c)
        log_w = ((k[:, P] * omega[:, None]).sum(-1) - 0.5 * k[:, P].pow(2).sum(-1)) * scale  # H x |P|
        beta = (torch.softmax(log_w, -1)[..., None] * v[:, P]).sum(1)  # H x d
        summaries.append((P, k_sum, beta))
    ys = []
    for n in range(L):
        E = local_set(mod, n, L)
        visible = [(ks, b) for P, ks, b in summaries if not mod.causal or max(P) < min(E)]
        logits = (q[:, n : n + 1] * k[:, E]).sum(-1) * scale  # H x |E|
        if isinstance(mod.rpe, PlaceBias) and E:  # by place: n's in its block, m's in n's window
            logits = logits + mod.rpe(n % mod.window_size, torch.tensor(E) - window_start(mod, n)).to(x.dtype)
        elif mod.rpe is not None and E:  # by offset m - n
            logits = logits + mod.rpe(torch.tensor(E) - n).to(x.dtype)
        logits = [logits] + [(q[:, n] * ks).sum(-1, keepdim=True) * scale + chunk_logit_offset for ks, _ in visible]
        values = torch.cat([v[:, E]] + [b[:, None] for _, b in visible], dim=1)  # H x K x d
        p = torch.softmax(torch.cat(logits, -1), -1)
        ys.append((p[..., None] * values).sum(1))
    y = torch.stack(ys, 1)  # H x L x d
    return merge(mod, y[None])[0]
