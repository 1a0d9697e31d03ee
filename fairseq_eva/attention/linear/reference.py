"""Naive float64 linear attention, query by query, from the definitions (for the tests only).

For each query n: the keys it sees (real, and m <= n when causal), their features phi(k_m), the weights
a_nm = phi(q_n) . phi(k_m) (times (1 - g_m) prod_{j=m+1..n} g_j with a gate), y_n = sum a v / sum a.
"""

import math

import torch


def features(kind, x, params, eps=0.0):
    """phi(x) per row (... x d -> ... x m). kind: positive | relu (params["w"]), rfa (params["w"], params["sigma"]
    per head), elu, t2r (params["w"], params["b"]). positive: m^-1/2 exp(w.x~ - |x~|^2/2), unshifted (float64
    holds it at the scales of the tests); relu: m^-1/2 ReLU(w.x~) + eps."""
    d = x.size(-1)
    if kind == "elu":
        return torch.where(x > 0, x + 1, torch.exp(x))
    if kind == "t2r":
        b = params["b"].reshape(params["b"].size(0), *([1] * (x.dim() - 3)), -1)  # H x (1) x k
        return torch.relu(torch.einsum("hkd,bh...d->bh...k", params["w"], x) + b)
    w = params["w"]
    m = w.size(-2)
    if kind == "rfa":
        unit = x / x.norm(dim=-1, keepdim=True)
        wx = torch.einsum("hkd,bh...d->bh...k", w, unit) / params["sigma"].reshape(-1, *([1] * (x.dim() - 2)))
        return torch.cat([torch.sin(wx), torch.cos(wx)], -1) / math.sqrt(m)
    xt = x / d**0.25
    wx = torch.einsum("hkd,bh...d->bh...k", w, xt)
    if kind == "relu":
        return torch.relu(wx) / math.sqrt(m) + eps
    return torch.exp(wx - (xt * xt).sum(-1, keepdim=True) / 2) / math.sqrt(m)


def reference(q, k, v, kind, params, causal=False, real=None, gate=None, eps=0.0, min_denominator=0.0):
    """q, k, v: B x H x N x d; real: B x N, True at real keys; gate: B x H x N, g_t in [0, 1] (causal); eps: the
    relu map's; min_denominator: a clamp of sum_m a_nm (0: none)."""
    q, k, v = (t.double() for t in (q, k, v))
    params = {name: p.double() for name, p in params.items()}
    B, H, N, d = q.shape
    out = torch.zeros_like(q)
    for n in range(N):
        seen = torch.ones(B, N, dtype=torch.bool) if real is None else real.clone()
        if causal:
            seen[:, n + 1 :] = False
        seen = seen[:, None, :].expand(B, H, N)
        fq = features(kind, q[:, :, n : n + 1], params, eps)[:, :, 0]
        fk = features(kind, k, params, eps)
        a = (fk * fq[:, :, None]).sum(-1)  # B x H x N
        if gate is not None:
            for m in range(n + 1):
                a[:, :, m] = a[:, :, m] * (1 - gate[:, :, m]) * torch.prod(gate[:, :, m + 1 : n + 1], -1)
        a = a.masked_fill(~seen, 0.0)
        den = a.sum(-1)
        den = den.clamp_min(min_denominator) if min_denominator else den
        out[:, :, n] = (a[..., None] * v).sum(2) / den[..., None]
    return out

