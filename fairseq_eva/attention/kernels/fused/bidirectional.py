"""Bidirectional EVA on torch's fused kernels: one call over all blocks, each block a batch row whose keys
are [its local keys ; every chunk summary], the RPE and the hidden keys an additive bias of shape (block, keys),
never (N, N)."""

import torch
import torch.nn.functional as F

from ...layout import additive_mask, lowest
from ..contract import rpe_grid, zero_unseen
from . import ops as fused_ops


def _cat_last(a, b):
    """Concatenates two masks along keys, broadcasting the other dimensions."""
    shape = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    return torch.cat([a.expand(*shape, a.size(-1)), b.expand(*shape, b.size(-1))], dim=-1)


def _heads(t):
    """B x blocks x L x H x d -> (B blocks) x H x L x d: blocks as batch rows of the fused attention."""
    return t.flatten(0, 1).transpose(1, 2)


def _block_keys(t, layout, nb):
    """B x H x (nb w) x d -> B x nb x width x H x d: each block's keys (a view without overlap)."""
    w = layout.window
    t = t.transpose(1, 2)
    if layout.overlap:
        return F.pad(t, (0, 0, 0, 0, w // 2, w // 2)).unfold(1, 2 * w, w).permute(0, 1, 4, 2, 3)
    return t.unflatten(1, (nb, w))


def _bias(layout, q, rpe, lengths, chunk_ok, C, nb):
    """The additive bias over [block keys ; chunks]: RPE, keys outside the sequence, hidden chunks; or None."""
    B, H, N, d = q.shape
    width = layout.width
    out_of_sequence = layout.offset < 0 or lengths is not None
    if rpe is None and not out_of_sequence and chunk_ok is None:
        return None
    bias = q.new_zeros(1, 1, 1, width) if rpe is None else rpe_grid(rpe, layout, q.device).to(q.dtype)[None]
    if out_of_sequence:
        key_pos = layout.key_positions(0, nb, q.device)  # nb x width
        length = N if lengths is None else lengths[:, None, None]
        outside = ((key_pos < 0) | (key_pos >= length)).expand(B, nb, width)
        bias = bias.masked_fill(outside.reshape(B * nb, 1, 1, width), lowest(q.dtype))
    if C:
        chunks = q.new_zeros(1, 1, 1, C)
        if chunk_ok is not None:
            chunks = additive_mask(~chunk_ok, q.dtype)[:, None].expand(B, nb, C).reshape(-1, 1, 1, C)
        bias = _cat_last(bias, chunks)
    return bias


def attention(*, layout, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, dropout, seed, scale, ops=None):
    """The kernel contract (contract.py) for a bidirectional layout. ops: which fused kernel runs (None: torch's,
    for q's device). The seed is unused: the CUDA kernel draws its own mask."""
    ops = ops or fused_ops.OPS[q.device.type]
    B, H, N, d = q.shape
    nb = N // layout.window
    keys, values = (_block_keys(t, layout, nb) for t in (k, v))  # B x nb x width x H x d
    C = 0 if k_summary is None else k_summary.size(2)
    if C:
        keys = torch.cat([keys, k_summary.to(q.dtype).transpose(1, 2)[:, None].expand(B, nb, C, H, d)], dim=2)
        values = torch.cat([values, beta.to(q.dtype).transpose(1, 2)[:, None].expand(B, nb, C, H, d)], dim=2)
    bias = _bias(layout, q, rpe, lengths, chunk_ok, C, nb)
    q_blocks = q.transpose(1, 2).unflatten(1, (nb, -1))  # B x nb x w x H x d, a view of token-major memory
    out, lse = fused_ops.FusedCall.apply(_heads(q_blocks), _heads(keys), _heads(values), bias, ops, float(dropout), scale)
    out = out.transpose(1, 2).reshape(B, N, H, d).transpose(1, 2)  # (B nb) x H x w x d -> B x H x N x d
    lse = lse.unflatten(0, (B, nb)).transpose(1, 2).flatten(2, 3)  # (B nb) x H x w -> B x H x N
    return zero_unseen(out, lse, q.dtype), lse.to(torch.promote_types(q.dtype, torch.float32))
