"""Causal EVA on torch's fused CPU attention kernel, its parts joined exactly by their log-sum-exp.

Contract: CPU tensors, no dropout, biases that need no gradient (a frozen RPE, or evaluation). Training
with attention dropout or a trainable RPE goes to blockwise.py instead (eva.py chooses; docs/design.md,
"Kernels").

Query block b attends, in one softmax, to three parts: its own block up to each query, the whole previous
block (with overlap), and the first K_b chunk summaries (layout.visible_chunks: a prefix, so no chunk mask
is ever built). Each part is one call of the fused kernel, which also returns l, the log-sum-exp of the
part's logits, and the parts are joined exactly:
    l = log sum_i exp(l_i),   y = sum_i exp(l_i - l) y_i.
The backward runs the kernel's own backward on each part with the joint y and l: the softmax gradient
dS = P (dP - rowsum(dy * y)) of the joint softmax needs nothing else.
"""

import torch

try:
    _forward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    _backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
except AttributeError:  # pragma: no cover - an older or newer torch without these kernels
    _forward = _backward = None


def accepts(q, bias_needs_grad, dropout):
    """Whether this kernel can compute the layer: on the CPU, without dropout or a bias gradient."""
    return _forward is not None and q.device.type == "cpu" and not bias_needs_grad and dropout == 0


def _batch(t):
    """B x blocks x ... -> (B blocks) x ...; the fused kernel takes 4-d inputs of any strides."""
    return t.flatten(0, 1)


def _parts(q, k, v, k_summary, beta, own_bias, prev_bias, layout):
    """(blocks, q, k, v, causal, mask, keys) of each part; q, k, v: (B blocks) x H x L x d.

    keys names where the part's keys come from: "own", "previous", or the number of chunk summaries.
    """
    B, H, N, d = q.shape
    w = layout.window
    nb = N // w
    qb, kb, vb = (t.transpose(1, 2).unflatten(1, (nb, w)).transpose(2, 3) for t in (q, k, v))  # B x nb x H x w x d
    yield slice(0, nb), _batch(qb), _batch(kb), _batch(vb), own_bias is None, own_bias, "own"
    if layout.overlap and nb > 1:
        yield slice(1, nb), _batch(qb[:, 1:]), _batch(kb[:, :-1]), _batch(vb[:, :-1]), False, prev_bias, "previous"
    if k_summary is not None:
        for b in range(nb):
            K = layout.visible_chunks(b, k_summary.size(2))
            if K > 0:
                yield slice(b, b + 1), qb[:, b], k_summary[:, :, :K], beta[:, :, :K], False, None, K


def _join(out, lse, part_out, part_lse):
    """Joins a part (its output and log-sum-exp) into (out, lse) in place."""
    joint = torch.logaddexp(lse, part_lse)
    out.mul_((lse - joint).exp().unsqueeze(-1)).add_(part_out * (part_lse - joint).exp().unsqueeze(-1))
    lse.copy_(joint)


class CausalFused(torch.autograd.Function):
    """q, k, v: B x H x N x d (N a multiple of the window); k_summary, beta: B x H x C x d or None;
    own_bias, prev_bias: additive masks (1 x H x w x w) or None, own_bias with the causal mask in it.
    Returns B x H x N x d."""

    @staticmethod
    def forward(ctx, q, k, v, k_summary, beta, own_bias, prev_bias, layout, scale):
        B = q.size(0)
        out = lse = None
        for blocks, qp, kp, vp, causal, mask, _ in _parts(q, k, v, k_summary, beta, own_bias, prev_bias, layout):
            part_out, part_lse = (t.unflatten(0, (B, -1)) for t in _forward(qp, kp, vp, 0.0, causal, attn_mask=mask, scale=scale))
            if out is None:  # B x blocks x H x w (x d)
                out, lse = part_out, part_lse
            else:
                _join(out[:, blocks], lse[:, blocks], part_out, part_lse)
        ctx.save_for_backward(q, k, v, k_summary, beta, own_bias, prev_bias, out, lse)
        ctx.layout, ctx.scale = layout, scale
        return out.transpose(2, 3).flatten(1, 2).transpose(1, 2)  # B x nb x H x w x d -> B x H x N x d

    @staticmethod
    def backward(ctx, grad):
        q, k, v, k_summary, beta, own_bias, prev_bias, out, lse = ctx.saved_tensors
        B, H, N, d = q.shape
        w = ctx.layout.window
        grad = grad.transpose(1, 2).unflatten(1, (N // w, w)).transpose(2, 3)  # B x nb x H x w x d
        dq = dk = dv = None
        d_summary = None if k_summary is None else torch.zeros_like(k_summary)
        d_beta = None if beta is None else torch.zeros_like(beta)
        for blocks, qp, kp, vp, causal, mask, keys in _parts(q, k, v, k_summary, beta, own_bias, prev_bias, ctx.layout):
            gq, gk, gv = _backward(
                _batch(grad[:, blocks]), qp, kp, vp, _batch(out[:, blocks]), _batch(lse[:, blocks]),
                0.0, causal, attn_mask=mask, scale=ctx.scale,
            )
            if keys == "own":  # B x nb x H x w x d, as grad
                dq, dk, dv = (g.unflatten(0, (B, -1)) for g in (gq, gk, gv))
            elif keys == "previous":
                dq[:, 1:] += gq.unflatten(0, (B, -1))
                dk[:, :-1] += gk.unflatten(0, (B, -1))
                dv[:, :-1] += gv.unflatten(0, (B, -1))
            else:
                dq[:, blocks] += gq.unsqueeze(1)
                d_summary[:, :, :keys] += gk
                d_beta[:, :, :keys] += gv
        dq, dk, dv = (g.transpose(2, 3).flatten(1, 2).transpose(1, 2) for g in (dq, dk, dv))
        return dq, dk, dv, d_summary, d_beta, None, None, None, None


def causal_attention(q, k, v, k_summary, beta, own_bias, prev_bias, layout, scale):
    """Causal EVA by the fused CPU kernel (see the module docstring for what it accepts)."""
    needs_grad = any(b is not None and b.requires_grad for b in (own_bias, prev_bias))
    if not accepts(q, needs_grad, 0.0):
        raise ValueError("cpu_fused.causal_attention takes CPU tensors and biases without gradient; use blockwise")
    return CausalFused.apply(q, k, v, k_summary, beta, own_bias, prev_bias, layout, scale)
