"""EVA's joint softmax, block by block: a trainable bias and dropout, any device, linear memory.

Every block of w queries attends, in one softmax, to its local keys (a window of the sequence) and to a
prefix of the chunk summaries. For a group of query blocks this module forms (docs/design.md, "Kernels")

    S = Q [K_local ; K~]^T / sqrt(d) + bias + mask,   P = softmax(S),   Y = (Z * P) [V_local ; beta],

Z the dropout mask (0 with probability p, else 1 / (1 - p): fairseq's dropout on attention probabilities,
local and chunk weights alike). Nothing of size N x keys is kept, only the log-sum-exp of each query's
logits: the backward recomputes S and P group by group, as FlashAttention does, and

    dS = P * (Z * dP - rowsum(P * Z * dP)),   dP = dY [V_local ; beta]^T,

which gives dQ, dK, dV, the chunk summaries' gradients, and the bias gradient: dS of the local keys summed
over blocks, one value per (head, query offset, key offset) for the caller to map onto its buckets.
Here groups of blocks run torch's matrix products and softmax_dropout.py's passes; the "c_loop" kernel
(c_loop/) runs the same autograd function with one compiled C loop for float32 on the CPU. The dropout
mask is a function of the seed, the query row and the key, so the backward draws the forward's mask again
instead of storing it.
"""

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from ..layout import additive_mask
from . import softmax_dropout
from .contract import KernelSpec, register, rpe_grid, zero_unseen

# logits a group holds at most (heads x queries x keys). CPU (where the C loop does not run): 4 MiB of float32, so
# that the passes over a group's logits run in the last-level cache; CUDA: 64 MiB, few kernel launches for a
# bounded transient memory.
GROUP_ELEMENTS = {"cpu": 2**20, "cuda": 2**24}


def _groups(layout, num_blocks, heads, num_chunks, device):
    """Consecutive blocks [b0, b1) whose logits fit in GROUP_ELEMENTS (one block at least)."""
    limit = GROUP_ELEMENTS.get(device.type, GROUP_ELEMENTS["cuda"])
    b0 = 0
    while b0 < num_blocks:
        b1 = b0 + 1
        while b1 < num_blocks:
            keys = layout.width + layout.visible_chunks(b1, num_chunks)
            if heads * (b1 + 1 - b0) * layout.window * keys > limit:
                break
            b1 += 1
        yield b0, b1
        b0 = b1


def _local(t, layout, b0, b1):
    """The local keys (or values) of blocks [b0, b1) of t (B x H x N x d): B x H x G x width x d."""
    N, w = t.size(2), layout.window
    lo, hi = b0 * w + layout.offset, (b1 - 1) * w + layout.offset + layout.width
    segment = t[:, :, max(lo, 0) : min(hi, N)]
    if lo < 0 or hi > N:
        segment = F.pad(segment, (0, 0, max(0, -lo), max(0, hi - N)))
    return segment.unfold(2, layout.width, w).transpose(-1, -2)


class _Group:
    """One group of query blocks [b0, b1): its scaled queries, its keys and values [local ; chunks]."""

    def __init__(self, q, k, v, k_summary, beta, layout, b0, b1, scale):
        B, H, N, d = q.shape
        w, G = layout.window, b1 - b0
        self.first, self.size = b0, G
        self.rows = slice(b0 * w, b1 * w)
        self.q = (q[:, :, self.rows].unflatten(2, (G, w)) * scale).contiguous()  # B x H x G x w x d
        self.chunks = 0 if k_summary is None else layout.visible_chunks(b1 - 1, k_summary.size(2))
        keys, values = _local(k, layout, b0, b1), _local(v, layout, b0, b1)
        if self.chunks:
            shape = (B, H, G, self.chunks, d)
            keys = torch.cat([keys, k_summary[:, :, None, : self.chunks].expand(shape)], dim=3)
            values = torch.cat([values, beta[:, :, None, : self.chunks].expand(shape)], dim=3)
        self.keys, self.values = keys, values  # B x H x G x (width + chunks) x d
        self.positions = layout.key_positions(b0, b1, q.device)  # G x width
        self.key_range = (b0 * w + layout.offset, (b1 - 1) * w + layout.offset + layout.width)  # [first, end)

    def row_ids(self, B, H, N):
        """The group's query rows as the dropout masks number them, (b H + h) N + n: B x H x G x w (CPU)."""
        first = (torch.arange(B)[:, None] * H + torch.arange(H)) * N
        return (first[:, :, None] + torch.arange(self.rows.start, self.rows.stop)).unflatten(2, (self.size, -1))

    def rows_of(self, t):
        """The group's rows of a B x H x N x e tensor, as B x H x G x w x e."""
        return t[:, :, self.rows].unflatten(2, (self.size, -1))

    def logits(self, layout, lengths, shortest, chunk_ok):
        """S of the group, B x H x G x w x (width + chunks), float32 at least, without the local bias."""
        low = torch.finfo(self.q.dtype).min
        S = torch.matmul(self.q, self.keys.transpose(-1, -2))
        if S.dtype in (torch.float16, torch.bfloat16):  # softmax statistics in float32
            S = S.float()
            low = torch.finfo(S.dtype).min
        local = S[..., : layout.width]
        if self.key_range[0] < 0 or self.key_range[1] > shortest:  # some key lies outside a sequence
            outside = (self.positions < 0) | (self.positions >= lengths[:, None, None])  # B x G x width
            local.masked_fill_(outside[:, None, :, None, :], low)
        if self.chunks:
            chunk = S[..., layout.width :]
            if chunk_ok is not None:
                chunk.masked_fill_(~chunk_ok[:, None, None, None, : self.chunks], low)
        return S

    def keys_seen(self, layout):
        """Causal groups of several blocks: how many of the group's keys each block sees (the blocks before
        its last see fewer chunks), G ints; None when every block sees them all."""
        if not (layout.causal and self.chunks and self.size > 1):
            return None
        return [layout.width + layout.visible_chunks(self.first + g, self.chunks) for g in range(self.size)]


def _local_bias(layout, grid, heads, dtype, device):
    """The additive bias every block shares over its local keys: the grid (RPE) plus, when causal, the
    mask of keys after the query; H x w x width, or None."""
    bias = None if grid is None else grid.to(dtype)
    if layout.causal:
        future = additive_mask(layout.after_query(device), dtype)
        bias = future.expand(heads, -1, -1) if bias is None else bias + future
    return None if bias is None else bias.contiguous()


def _logits(q, k, v, k_summary, beta, lengths, chunk_ok, layout, scale):
    """(group, S) for each group of blocks: what the forward computes and the backward recomputes."""
    N = q.size(2)
    shortest = int(lengths.min())
    C = 0 if k_summary is None else k_summary.size(2)
    for b0, b1 in _groups(layout, N // layout.window, q.size(1), C, q.device):
        g = _Group(q, k, v, k_summary, beta, layout, b0, b1, scale)
        yield g, g.logits(layout, lengths, shortest, chunk_ok)


def _forward_groups(q, k, v, k_summary, beta, bias, lengths, chunk_ok, layout, dropout, scale, seed):
    """(Y, lse) group by group: torch's products and softmax_dropout.py's passes."""
    B, H, N, d = q.shape
    out = q.new_empty(B, N, H, d).transpose(1, 2)
    lse = q.new_empty(B, H, N, dtype=torch.promote_types(q.dtype, torch.float32))  # S's dtype (see logits)
    for g, S in _logits(q, k, v, k_summary, beta, lengths, chunk_ok, layout, scale):
        PZ, g_lse = softmax_dropout.forward(S, bias, g.keys_seen(layout), dropout, seed, g.row_ids(B, H, N))
        lse[:, :, g.rows] = g_lse.flatten(2, 3)
        out[:, :, g.rows] = torch.matmul(PZ.to(g.values.dtype), g.values).flatten(2, 3)
    return out, lse


def _backward_groups(grad, q, k, v, k_summary, beta, bias, lse, lengths, chunk_ok, layout, dropout, scale, seed, bias_grad):
    """(dq, dk, dv, d_summary, d_beta, d_bias) group by group; d_bias (H x w x width) only if bias_grad."""
    B, H, N, d = q.shape
    width, left = layout.width, max(0, -layout.offset)  # dk, dv hold `left` positions before 0
    dq = q.new_empty(B, N, H, d).transpose(1, 2)
    own_keys = layout.offset == 0 and width == layout.window  # every key is local to one block: dk, dv by copies
    dk, dv = ((q.new_empty if own_keys else q.new_zeros)(B, left + N + width, H, d).transpose(1, 2) for _ in range(2))
    d_summary = None if k_summary is None else torch.zeros_like(k_summary)
    d_beta = None if beta is None else torch.zeros_like(beta)
    d_bias = lse.new_zeros(bias.shape) if bias_grad else None
    for g, S in _logits(q, k, v, k_summary, beta, lengths, chunk_ok, layout, scale):
        dy = g.rows_of(grad)  # B x H x G x w x d
        dP = torch.matmul(dy, g.values.transpose(-1, -2)).to(S.dtype)
        l_rows = lse[:, :, g.rows].unflatten(2, (g.size, -1))
        PZ, dS = softmax_dropout.backward(S, dP, l_rows, bias, g.keys_seen(layout), d_bias, dropout, seed, g.row_ids(B, H, N))
        del S, dP
        d_values = torch.matmul(PZ.to(dy.dtype).transpose(-1, -2), dy)  # B x H x G x keys x d
        del PZ
        dS = dS.to(g.keys.dtype)
        dq[:, :, g.rows] = torch.matmul(dS, g.keys).mul_(scale).flatten(2, 3)
        d_keys = torch.matmul(dS.transpose(-1, -2), g.q)  # g.q is scaled already
        del dS
        if own_keys:
            dk[:, :, g.rows] = d_keys[:, :, :, :width].flatten(2, 3)
            dv[:, :, g.rows] = d_values[:, :, :, :width].flatten(2, 3)
        else:
            positions = (g.positions + left).flatten()
            dk.index_add_(2, positions, d_keys[:, :, :, :width].flatten(2, 3))
            dv.index_add_(2, positions, d_values[:, :, :, :width].flatten(2, 3))
        if g.chunks:
            d_summary[:, :, : g.chunks] += d_keys[:, :, :, width:].sum(2)
            d_beta[:, :, : g.chunks] += d_values[:, :, :, width:].sum(2)
    return dq, dk[:, :, left : left + N], dv[:, :, left : left + N], d_summary, d_beta, d_bias


class Implementation(NamedTuple):
    """How the blockwise kernel runs its forward and backward: the groups above, or the C loop (c_loop/)."""

    prepare: Callable  # (q, k, v, k_summary, beta) as forward and backward read them
    forward: Callable  # _forward_groups' arguments -> (Y, lse)
    backward: Callable  # _backward_groups' arguments -> (dq, dk, dv, d_summary, d_beta, d_bias)


GROUPS = Implementation(lambda *tensors: tensors, _forward_groups, _backward_groups)


class BlockwiseAttention(torch.autograd.Function):
    """q, k, v: B x H x N x d, N a multiple of the window (a query block never straddles the end);
    k_summary, beta: B x H x C x d or None; grid: the bias of the local keys, H x w x width, or None;
    lengths: B, the real tokens of each row (keys at or after it are hidden); chunk_ok: B x C or None;
    layout: a layout.BlockLayout. Returns (Y, lse): Y B x H x N x d (a view of B x N x H x d memory), lse
    B x H x N (no gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, k_summary, beta, grid, lengths, chunk_ok, layout, dropout, scale, seed, implementation):
        bias = _local_bias(layout, grid, q.size(1), torch.promote_types(q.dtype, torch.float32), q.device)
        q, k, v, k_summary, beta = implementation.prepare(q, k, v, k_summary, beta)
        out, lse = implementation.forward(q, k, v, k_summary, beta, bias, lengths, chunk_ok, layout, dropout, scale, seed)
        ctx.save_for_backward(q, k, v, k_summary, beta, grid, lengths, chunk_ok, lse)
        ctx.layout, ctx.dropout, ctx.scale, ctx.seed, ctx.implementation = layout, dropout, scale, seed, implementation
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad, grad_lse):
        q, k, v, k_summary, beta, grid, lengths, chunk_ok, lse = ctx.saved_tensors
        bias = _local_bias(ctx.layout, grid, q.size(1), lse.dtype, q.device)
        bias_grad = grid is not None and ctx.needs_input_grad[5]
        *grads, d_bias = ctx.implementation.backward(grad, q, k, v, k_summary, beta, bias, lse, lengths, chunk_ok, ctx.layout,
                                                     ctx.dropout, ctx.scale, ctx.seed, bias_grad)
        return (*grads, None if d_bias is None else d_bias.to(grid.dtype), None, None, None, None, None, None, None)


def attention(*, layout, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, dropout, seed, scale, implementation=GROUPS):
    """The kernel contract (contract.py) by blocks: the RPE as the grid every block shares."""
    grid = rpe_grid(rpe, layout, q.device)  # H x w x width
    seed = 0 if seed is None else int(seed)  # the masks are drawn from a Python int (on CUDA: a wait for the device)
    if lengths is None:
        lengths = torch.full((q.size(0),), q.size(2), device=q.device)
    if k_summary is not None:  # one dtype for the matrix products of the backward (autocast is off there)
        k_summary, beta = k_summary.to(q.dtype), beta.to(q.dtype)
    y, lse = BlockwiseAttention.apply(q, k, v, k_summary, beta, grid, lengths, chunk_ok, layout, float(dropout), scale, seed,
                                      implementation)
    return zero_unseen(y, lse, q.dtype), lse


register(KernelSpec(
    name="blockwise",
    run=attention,
    devices=frozenset({"cpu", "cuda"}),
    dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64}),
    compiles=False,  # its groups depend on the lengths' values (data-dependent shapes)
    summary="groups of blocks in torch's products and PyTorch passes, recomputed in the backward: everything, "
            "any device, linear memory; the fallback",
))
