"""Causal EVA on torch's fused attention kernels, its parts joined exactly by their log-sum-exp.

Query block b attends, in one softmax, to three parts: its own block up to each query, the whole previous
block (with overlap), and the first K_b chunk summaries (layout.visible_chunks: a prefix). Each part is one
call of a fused kernel, which also returns l, the log-sum-exp of the part's logits, and the parts are joined
exactly:
    l = log sum_i exp(l_i),   y = sum_i exp(l_i - l) y_i.
With attention dropout each part drops its own probabilities; the join keeps fairseq's meaning (dropout on
the joint probabilities), as each y_i is normalised by its part's undropped sum exp(l_i).
The backward runs the kernel's own backward on each part with the joint y and l: the softmax gradient
dS = P (dP - rowsum(dy * y)) of the joint softmax needs nothing else (with dropout too: rowsum(dy * y) is
rowsum(P * dP) for the dropped dP), and dS summed over blocks is the gradient of the shared bias (RPE).

The parts run on ops.py's kernels (docs/design.md, "Kernels"). On the CPU each block's summaries are one
call (a prefix needs no mask). On CUDA, where one launch per block would be hundreds, blocks are grouped
into calls of up to ops.GROUP_LOGITS logits, and the staircase of the chunks each block sees is an additive
mask.
"""

import torch

from ...layout import additive_mask, lowest
from ..contract import rpe_grid, zero_unseen
from . import ops as fused_ops


class _Part:
    """One fused call: the queries of `blocks` against `keys` ("own", "previous", or K chunk summaries).
    Own and previous parts have the blocks as batch rows, (B blocks) x H x w x d; a chunk part has its
    blocks' queries as one sequence, B x H x (blocks w) x d."""

    def __init__(self, blocks, keys, k, v, causal, bias):
        self.blocks, self.keys, self.k, self.v, self.causal, self.bias = blocks, keys, k, v, causal, bias

    def rows(self, t):
        """B x nb x H x w (x d) -> this part's query rows."""
        t = t[:, self.blocks]
        return t.flatten(0, 1) if isinstance(self.keys, str) else t.transpose(1, 2).flatten(2, 3)

    def blocks_of(self, t, B):
        """This part's query rows -> B x blocks x H x w (x d)."""
        return t.unflatten(0, (B, -1)) if isinstance(self.keys, str) else t.unflatten(2, (self.size, -1)).transpose(1, 2)

    @property
    def size(self):
        return self.blocks.stop - self.blocks.start


def _chunk_groups(layout, nb, total, group_logits):
    """(b0, b1, K): blocks [b0, b1) attend to the first K summaries in one call (K: what b1 - 1 sees)."""
    b0 = 0
    while b0 < nb and layout.visible_chunks(b0, total) == 0:
        b0 += 1
    while b0 < nb:
        b1 = b0 + 1
        while b1 < nb and (b1 + 1 - b0) * layout.window * layout.visible_chunks(b1, total) <= group_logits:
            b1 += 1
        yield b0, b1, layout.visible_chunks(b1 - 1, total)
        b0 = b1


def _staircase(layout, b0, b1, K, dtype, device):
    """The additive mask of the summaries each query of blocks [b0, b1) does not see: rows x K, or None."""
    seen = [layout.visible_chunks(b, K) for b in range(b0, b1)]
    if min(seen) == K:
        return None
    seen = torch.tensor(seen, device=device).repeat_interleave(layout.window)
    return additive_mask(torch.arange(K, device=device) >= seen[:, None], dtype)


def _parts(ops, k, v, k_summary, beta, own_bias, prev_bias, layout):
    """The parts of the joint softmax; k, v: B x nb x H x w x d."""
    nb, w = k.size(1), layout.window
    if own_bias is None and ops.trains_bias_and_dropout:  # this kernel takes the causal mask as a bias
        own_bias = additive_mask(layout.after_query(k.device)[:, -w:], k.dtype)  # the own block's keys after the query
    yield _Part(slice(0, nb), "own", k.flatten(0, 1), v.flatten(0, 1), own_bias is None, own_bias)
    if layout.overlap and nb > 1:
        if prev_bias is None and ops.trains_bias_and_dropout:
            prev_bias = k.new_zeros(w, w)
        yield _Part(slice(1, nb), "previous", k[:, :-1].flatten(0, 1), v[:, :-1].flatten(0, 1), False, prev_bias)
    if k_summary is not None:
        for b0, b1, K in _chunk_groups(layout, nb, k_summary.size(2), ops.group_logits):
            mask = _staircase(layout, b0, b1, K, k.dtype, k.device)
            yield _Part(slice(b0, b1), K, k_summary[:, :, :K], beta[:, :, :K], False, mask)


def _by_blocks(t, w):
    """B x H x N x d -> B x nb x H x w x d."""
    return t.transpose(1, 2).unflatten(1, (-1, w)).transpose(2, 3)


def _join(out, lse, part_out, part_lse):
    """Joins a part (its output and log-sum-exp) into (out, lse), in place."""
    joint = torch.logaddexp(lse, part_lse)
    out.mul_((lse - joint).exp().unsqueeze(-1)).add_(part_out * (part_lse - joint).exp().unsqueeze(-1))
    lse.copy_(joint)


class CausalFused(torch.autograd.Function):
    """q, k, v: B x H x N x d (N a multiple of the window); k_summary, beta: B x H x C x d or None;
    own_bias, prev_bias: additive biases (broadcasting to 1 x H x w x w) or None, own_bias with the causal
    mask in it; ops: ops.py's CPUOps or CUDAOps (or the tests' stand-in). Returns (Y, lse): B x H x N x d and
    B x H x N (float32 at least, no gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, k_summary, beta, own_bias, prev_bias, layout, scale, dropout, ops):
        B, w = q.size(0), layout.window
        qb, kb, vb = (_by_blocks(t, w) for t in (q, k, v))
        out = lse = None
        states = []
        for part in _parts(ops, kb, vb, k_summary, beta, own_bias, prev_bias, layout):
            part_out, part_lse, state = ops.forward(part.rows(qb), part.k, part.v, part.bias, part.causal, dropout, scale)
            states.append(state)
            part_out, part_lse = part.blocks_of(part_out, B), part.blocks_of(part_lse, B)
            if out is None:  # B x nb x H x w (x d), at least float32
                precision = torch.promote_types(q.dtype, torch.float32)
                out, lse = part_out.to(precision), part_lse.to(precision)
            else:
                _join(out[:, part.blocks], lse[:, part.blocks], part_out, part_lse)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, k_summary, beta, own_bias, prev_bias, out, lse)
        ctx.layout, ctx.scale, ctx.dropout, ctx.states, ctx.ops = layout, scale, dropout, states, ops
        joint_lse = lse.transpose(1, 2).flatten(2, 3)  # B x nb x H x w -> B x H x N
        ctx.mark_non_differentiable(joint_lse)
        return out.transpose(2, 3).flatten(1, 2).transpose(1, 2), joint_lse  # B x nb x H x w x d -> B x H x N x d

    @staticmethod
    def backward(ctx, grad, grad_lse):
        q, k, v, k_summary, beta, own_bias, prev_bias, out, lse = ctx.saved_tensors
        B, w = q.size(0), ctx.layout.window
        qb, kb, vb, grad = (_by_blocks(t, w) for t in (q, k, v, grad))
        dq = dk = dv = None  # B x nb x H x w x d, from the own part (the first)
        d_summary = None if k_summary is None else torch.zeros_like(k_summary)
        d_beta = None if beta is None else torch.zeros_like(beta)
        trainable = {"own": own_bias is not None and ctx.needs_input_grad[5],
                     "previous": prev_bias is not None and ctx.needs_input_grad[6]}
        d_bias = {}
        parts = _parts(ctx.ops, kb, vb, k_summary, beta, own_bias, prev_bias, ctx.layout)
        for part, state in zip(parts, ctx.states):
            bias_grad = trainable.get(part.keys, False)
            gq, gk, gv, g_bias = ctx.ops.backward(
                part.rows(grad), part.rows(qb), part.k, part.v, part.bias, part.rows(out), part.rows(lse).contiguous(),
                state, part.causal, ctx.dropout, ctx.scale, bias_grad,
            )
            if part.keys == "own":
                dq, dk, dv = (g.unflatten(0, (B, -1)) for g in (gq, gk, gv))
            elif part.keys == "previous":
                dq[:, 1:] += gq.unflatten(0, (B, -1))
                dk[:, :-1] += gk.unflatten(0, (B, -1))
                dv[:, :-1] += gv.unflatten(0, (B, -1))
            else:
                dq[:, part.blocks] += part.blocks_of(gq, B)
                d_summary[:, :, : part.keys] += gk
                d_beta[:, :, : part.keys] += gv
            if bias_grad:  # summed over the blocks that share the bias
                d_bias[part.keys] = g_bias.sum(0, dtype=lse.dtype)  # at least float32
        dq, dk, dv = (g.transpose(2, 3).flatten(1, 2).transpose(1, 2) for g in (dq, dk, dv))
        d_own, d_prev = (d_bias[name].reshape(b.shape).to(b.dtype) if name in d_bias else None
                         for name, b in (("own", own_bias), ("previous", prev_bias)))
        return dq, dk, dv, d_summary, d_beta, d_own, d_prev, None, None, None, None


def attention(*, layout, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, dropout, seed, scale, ops=None):
    """The kernel contract (contract.py) for a causal layout. ops: which fused kernel runs the parts (None: torch's,
    for q's device). Pads come after every real query in causal EVA, so the layer never passes lengths or
    chunk_ok, and this kernel takes neither. The seed is unused: the CUDA kernel draws its own mask."""
    if lengths is not None or chunk_ok is not None:
        raise ValueError("the fused causal kernel takes no lengths or chunk_ok (pads come after every real query); "
                         "use the blockwise kernel")
    ops = ops or fused_ops.OPS[q.device.type]
    w = layout.window
    own_bias = prev_bias = None
    if rpe is not None:
        grid = rpe_grid(rpe, layout, q.device).to(q.dtype)  # H x w x width
        own_bias = grid[None, :, :, -w:].masked_fill(layout.after_query(q.device)[:, -w:], lowest(q.dtype))
        prev_bias = grid[None, :, :, :w] if layout.overlap else None
    if k_summary is not None:  # one dtype for the kernels (autocast gives float32 summaries)
        k_summary, beta = k_summary.to(q.dtype), beta.to(q.dtype)
    y, lse = CausalFused.apply(q, k, v, k_summary, beta, own_bias, prev_bias, layout, scale, float(dropout), ops)
    return zero_unseen(y, lse, q.dtype), lse
