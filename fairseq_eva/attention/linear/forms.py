"""Normalised linear attention over given features, in its bidirectional form and three causal forms.

With query features phi(q_n) and key features phi_n(k_m) (B x H x N x m), the output is

    y_n = sum_m a_nm v_m / sum_m a_nm,    a_nm = phi(q_n) . phi_n(k_m),

over the real keys m (and m <= n when causal). The key features are given as psi_m (B x H x N x m) with a
log-scale s_m (B x H x N) and a per-step log-decay lambda_t (B x H x N, causal), and reach the query n as

    phi_n(k_m) = psi_m exp(s_m + Lambda_n - Lambda_m - c_n),    Lambda_n = sum_{t <= n} lambda_t,
    c_n = max over the keys m that n sees of s_m + Lambda_n - Lambda_m.

- s carries what would overflow if folded into psi: FAVOR+'s exponent (feature_maps.py). The shift c_n is
  common to every key that query n sees, so it cancels between numerator and denominator: it keeps the
  exponentials in range and changes nothing else. It is taken over the prefix m <= n when causal (nothing then
  depends on later tokens).
- lambda is RFA's gate, log g_t (Peng et al. 2021, Eq. 7: S_t = g_t S_{t-1} + (1 - g_t) phi(k_t) v_t^T, with
  1 - g_t folded into psi_t); without s, c_n = 0 and every exponent is <= 0.

The denominator is clamped at `min_denominator`, and at least at the smallest normal number of its dtype: with
nonnegative features that bound binds only where every weight is 0 (a query that sees no real key), whose
output is then 0 rather than 0/0; trigonometric features (RFA) can make the denominator <= 0 and take a larger
clamp. Padded keys have phi(k) = 0. The causal forms: the quadratic one (materialises N x N; for tests), the
chunked one (the layer's: within a chunk the quadratic form, across chunks a state carried with its own
shift; nothing N x N) and the recurrent one (the state of incremental decoding, O(1) a token).
"""

from typing import Dict

import torch
from torch import Tensor


def _lowest(dtype):
    """A shift below any exponent that still leaves `lowest - x` finite."""
    return torch.finfo(dtype).min / 4


def _prepare(fk, s, lam, real):
    """Zeros for absent s and lambda; padded keys get psi = 0, s = -inf (no weight), lambda = 0."""
    B, H, N, _ = fk.shape
    s = fk.new_zeros(B, H, N) if s is None else s
    lam = fk.new_zeros(B, H, N) if lam is None else lam
    if real is None:
        return fk, s, lam
    pad = ~real[:, None, :]  # B x 1 x N
    return fk.masked_fill(pad[..., None], 0.0), s.masked_fill(pad, float("-inf")), lam.masked_fill(pad, 0.0)


def _divide(num, den, min_denominator=0.0):
    """num / den, den clamped at min_denominator and at least at the dtype's smallest normal number."""
    return num / den.clamp_min(max(min_denominator, torch.finfo(den.dtype).tiny))[..., None]


def bidirectional(fq, fk, v, s=None, real=None, min_denominator=0.0):
    """phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1): every real key for every query, with one shift c (the
    largest s over the real keys of the row)."""
    fk, s, _ = _prepare(fk, s, None, real)
    c = s.amax(-1, keepdim=True).clamp_min(_lowest(s.dtype))
    fk = fk * torch.exp(s - c)[..., None]
    num = fq @ (fk.transpose(-1, -2) @ v)
    den = fq @ fk.sum(-2)[..., None]
    return _divide(num, den.squeeze(-1), min_denominator)


def _causal_exponents(s, lam_cumsum):
    """E[t, i] = s_i + Lambda_t - Lambda_i for i <= t, -inf after t (B x H x L x L)."""
    L = s.size(-1)
    E = s[..., None, :] + lam_cumsum[..., :, None] - lam_cumsum[..., None, :]
    future = torch.ones(L, L, dtype=torch.bool, device=s.device).triu(1)
    return E.masked_fill(future, float("-inf"))


def causal_quadratic(fq, fk, v, s=None, lam=None, real=None, min_denominator=0.0):
    """The N x N weights a_nm with m <= n, materialised (for tests)."""
    fk, s, lam = _prepare(fk, s, lam, real)
    E = _causal_exponents(s, lam.cumsum(-1))
    c = E.amax(-1, keepdim=True).clamp_min(_lowest(E.dtype))
    A = (fq @ fk.transpose(-1, -2)) * torch.exp(E - c)
    return _divide(A @ v, A.sum(-1), min_denominator)


def causal_chunked(fq, fk, v, s=None, lam=None, real=None, min_denominator=0.0, chunk_size=64):
    """Chunks of `chunk_size` queries: the quadratic form inside the chunk, plus the state of the keys before it,
    S = sum_m psi_m exp(s_m + Lambda_end - Lambda_m - c_end) v_m^T kept at the shift c_end of the previous
    chunk's last position (and z likewise). Costs O(N (chunk_size + m) d); the largest tensor is chunk x chunk."""
    fk, s, lam = _prepare(fk, s, lam, real)
    B, H, N, m = fk.shape
    state = fk.new_zeros(B, H, m, v.size(-1))
    norm = fk.new_zeros(B, H, m)
    c_prev = fk.new_full((B, H, 1), _lowest(fk.dtype))
    nums, dens = [], []
    for t0 in range(0, N, chunk_size):
        part = slice(t0, t0 + chunk_size)
        fq_c, fk_c, v_c, s_c = fq[..., part, :], fk[..., part, :], v[..., part, :], s[..., part]
        lam_c = lam[..., part].cumsum(-1)  # Lambda_t - Lambda_{t0 - 1}
        E = _causal_exponents(s_c, lam_c)
        c = torch.maximum(c_prev + lam_c, E.amax(-1))  # B x H x L
        A = (fq_c @ fk_c.transpose(-1, -2)) * torch.exp(E - c[..., None])
        carry = torch.exp(c_prev + lam_c - c)  # the state's weight at each query, relative to c
        nums.append(carry[..., None] * (fq_c @ state) + A @ v_c)
        dens.append(carry * (fq_c @ norm[..., None]).squeeze(-1) + A.sum(-1))
        # the state at the chunk's last position, at its shift
        c_end = c[..., -1:]
        w_end = torch.exp(E[..., -1, :] - c_end)[..., None] * fk_c  # B x H x L x m
        decay = torch.exp(c_prev + lam_c[..., -1:] - c_end)
        state = decay[..., None] * state + w_end.transpose(-1, -2) @ v_c
        norm = decay * norm + w_end.sum(-2)
        c_prev = c_end
    return _divide(torch.cat(nums, -2), torch.cat(dens, -1), min_denominator)


def initial_state(fq, v) -> Dict[str, Tensor]:
    """The recurrent state before any key: S (B x H x m x d) and z (B x H x m) at shift c (B x H)."""
    B, H, _, m = fq.shape
    return {
        "state": fq.new_zeros(B, H, m, v.size(-1)),
        "normaliser": fq.new_zeros(B, H, m),
        "shift": fq.new_full((B, H), _lowest(fq.dtype)),
    }


def recurrent_step(cache, fq, fk, v, s=None, lam=None, min_denominator=0.0, real=None):
    """One position (B x H x 1 x ...): S_t = exp(c_{t-1} + lambda_t - c_t) S_{t-1} + exp(s_t - c_t) psi_t v_t^T,
    c_t = max(c_{t-1} + lambda_t, s_t); updates `cache` in place and returns y_t (B x H x 1 x d)."""
    fk, s, lam = _prepare(fk, s, lam, real)
    fq, fk, v, s, lam = fq[..., 0, :], fk[..., 0, :], v[..., 0, :], s[..., 0], lam[..., 0]
    c = torch.maximum(cache["shift"] + lam, s)
    decay, weight = torch.exp(cache["shift"] + lam - c), torch.exp(s - c)
    state = decay[..., None, None] * cache["state"] + (weight[..., None] * fk)[..., None] * v[..., None, :]
    norm = decay[..., None] * cache["normaliser"] + weight[..., None] * fk
    cache.update(state=state, normaliser=norm, shift=c)
    num = (fq[..., None, :] @ state).squeeze(-2)
    return _divide(num, (fq * norm).sum(-1), min_denominator)[..., None, :]


def causal_recurrent(fq, fk, v, s=None, lam=None, real=None, min_denominator=0.0):
    """Token by token through recurrent_step (the incremental-decoding state)."""
    cache = initial_state(fq, v)
    N = fq.size(-2)
    at = lambda t, x: None if x is None else x[:, :, t : t + 1]  # noqa: E731  (B x H x N ...: position t)
    ys = [recurrent_step(cache, at(t, fq), at(t, fk), at(t, v), at(t, s), at(t, lam), min_denominator,
                         None if real is None else real[:, t : t + 1]) for t in range(N)]
    return torch.cat(ys, -2)

