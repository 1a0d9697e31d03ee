"""The elementwise passes of the blockwise kernel in PyTorch (bias, softmax and dropout forward, and their
backward), and the dropout masks.

A group's logits S are B x H x G x w x keys (float32 at least, contiguous): B rows, H heads, G blocks of w
queries, the first `width` keys local (they get the bias, H x w x width, the same for every block) and the
rest chunk summaries, of which block g sees those before seen[g] (causal groups; the others have weight 0).
Forward, row by row (S is overwritten):

    x = S + [bias ; 0],   lse = log sum exp x,   P = exp(x - lse),   S <- Z * P,

Z the dropout mask (0 or scale). Backward, given the logits S again, dP = dY V^T and lse:

    P = exp(x - lse),   S <- Z * P (for dV),   dP <- dS = P * (Z * dP - rowsum(P * Z * dP)),
    d_bias += dS over blocks.

(rowsum(P * Z * dP) is rowsum(dY * Y), but taking it from Y would keep Y alive until this backward.)
These passes are the "blockwise" kernel's; the "c_loop" kernel (c_loop/) does them in C; where both run
they agree mask for mask, which the tests check.

Dropout masks are a function of (seed, query row, key): on the CPU a counter-based hash (the C loop's, so
the backward draws the forward's mask again and the two implementations can be compared); on other devices
torch's generator, seeded per group. Draws are 16 bits: an element is dropped when its draw is below
round(p 2^16), and kept ones are scaled by 2^16 / (2^16 - that threshold), so E[Z] = 1 exactly.
"""

import torch

MASK32 = 0xFFFFFFFF


def threshold(p):
    """Draws below this (of 2^16) are dropped."""
    return round(p * 2**16)


def keep_scale(p):
    return 2**16 / (2**16 - threshold(p))


def seed_words(seed):
    """Two 32-bit words of splitmix64(seed): nearby seeds give unrelated masks."""
    z = (seed + 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    z ^= z >> 31
    return z & MASK32, z >> 32


def _mix32(x):
    """lowbias32 (the C loop's mix32) on int64 tensors holding 32-bit values (the products split so that
    none overflows)."""

    def times(x, c):
        return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32

    x = x ^ (x >> 16)
    x = times(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = times(x, 0x846CA68B)
    return x ^ (x >> 16)


def draws(rows, keys, seed, device):
    """16-bit dropout draws (int32 in [0, 2^16)) of the first `keys` elements of each of `rows` (a CPU tensor
    of query rows, (b H + h) N + n), shape rows.shape x keys on `device`: a function of the seed and the rows.
    On the CPU, row r's draws are those of the C loop: two to a hash of (seed, r, j // 2), low half first."""
    if device.type == "cpu":
        s0, s1 = seed_words(seed)
        row_seed = _mix32((rows.to(torch.int64) + s0) & MASK32)[..., None]
        pairs = torch.arange((keys + 1) // 2, dtype=torch.int64)
        h = _mix32(_mix32((pairs + row_seed) & MASK32) ^ s1)
        return torch.stack([h & 0xFFFF, h >> 16], dim=-1).flatten(-2)[..., :keys].to(torch.int32)
    count = rows.numel() * keys
    generator = torch.Generator(device=device).manual_seed(seed + int(rows.flatten()[0]))
    bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(-(2**63), None, generator=generator)
    return bits.view(torch.int16)[:count].view(*rows.shape, keys).to(torch.int32) + 2**15


def _mask(S, p, seed, rows):
    """Z of a group (S's shape and dtype): 0 or keep_scale(p)."""
    keep = draws(rows, S.size(-1), seed, S.device) >= threshold(p)
    return keep.to(S.dtype).mul_(keep_scale(p))


def _biased_logits(S, bias, seen):
    """S + [bias ; 0] in place, the keys a block does not see at the lowest value; returns the bias width."""
    width = 0 if bias is None else bias.size(-1)
    if bias is not None:
        S[..., :width].add_(bias[None, :, None])  # H x w x width -> 1 x H x 1 x w x width
    if seen is not None:
        unseen = torch.arange(S.size(-1), device=S.device) >= torch.tensor(seen, device=S.device)[:, None]  # G x keys
        S.masked_fill_(unseen[:, None], torch.finfo(S.dtype).min)
    return width


def forward(S, bias, seen, p, seed, rows):
    """(Z * softmax(S + [bias ; 0]), lse), lse B x H x G x w; S is overwritten. rows: the query rows of S
    (B x H x G x w, see draws)."""
    _biased_logits(S, bias, seen)
    lse = torch.logsumexp(S, dim=-1)
    P = torch.softmax(S, dim=-1)
    if p > 0:
        P.mul_(_mask(P, p, seed, rows))
    return P, lse


def backward(S, dP, lse, bias, seen, d_bias, p, seed, rows):
    """(Z * P, dS); d_bias (H x w x width) += dS of the local keys over blocks. S and dP are overwritten.
    The fused softmax recomputes what lse holds (fewer passes on a GPU)."""
    width = _biased_logits(S, bias, seen)
    P = torch.softmax(S, dim=-1)
    if p > 0:
        Z = _mask(P, p, seed, rows)
        dP.mul_(Z)
    dS = torch._softmax_backward_data(dP, P, -1, P.dtype)  # P * (Z dP - rowsum(P Z dP))
    if p > 0:
        P.mul_(Z)
    if d_bias is not None:
        d_bias += dS[..., :width].sum((0, 2))
    return P, dS
