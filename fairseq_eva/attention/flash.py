"""Causal EVA on torch's fused CPU attention kernel (flash attention), its parts joined exactly.

Query block b attends, in one softmax (DESIGN section 2), to three parts: its own block up to each
query, the whole previous block (with overlap), and the first K_b chunk summaries (those that end before
its local set: a prefix, so no chunk mask is ever built). Each part is one call of the fused kernel, which
also returns l, the log-sum-exp of the part's logits, and the parts are joined exactly:
    l = log sum_i exp(l_i),   y = sum_i exp(l_i - l) y_i.
The backward runs the kernel's own backward on each part with the joint y and l: the softmax gradient
dS = P (dP - rowsum(dy * y)) of the joint softmax needs nothing else.

Bidirectional EVA needs none of this: all its blocks see all chunks, one call of
scaled_dot_product_attention does it (eva.py).
"""

import torch

try:
    _forward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    _backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
except AttributeError:  # pragma: no cover - an older or newer torch without these kernels
    _forward = _backward = None


def available(q):
    return _forward is not None and q.device.type == "cpu"


def _batch(t):
    """B x blocks x ... -> (B blocks) x ...; the fused kernel takes 4-d inputs of any strides."""
    return t.flatten(0, 1)


def _parts(q, k, v, k_summary, beta, own_bias, prev_bias, w, per_block, overlap):
    """(blocks, q, k, v, causal, mask, keys) of each part; q, k, v: (B blocks) x H x L x d.

    keys names where the part's keys come from: "own", "previous", or the number of chunk summaries.
    """
    B, H, N, d = q.shape
    nb = N // w
    qb, kb, vb = (t.transpose(1, 2).unflatten(1, (nb, w)).transpose(2, 3) for t in (q, k, v))  # B x nb x H x w x d
    yield slice(0, nb), _batch(qb), _batch(kb), _batch(vb), own_bias is None, own_bias, "own"
    if overlap and nb > 1:
        yield slice(1, nb), _batch(qb[:, 1:]), _batch(kb[:, :-1]), _batch(vb[:, :-1]), False, prev_bias, "previous"
    if k_summary is not None:
        for b in range(1 + overlap, nb):
            K = (b - overlap) * per_block
            yield slice(b, b + 1), qb[:, b], k_summary[:, :, :K], beta[:, :, :K], False, None, K


def _join(out, lse, o, l):
    """Joins part (o, l) into (out, lse) in place."""
    joint = torch.logaddexp(lse, l)
    out.mul_((lse - joint).exp().unsqueeze(-1)).add_(o * (l - joint).exp().unsqueeze(-1))
    lse.copy_(joint)


class CausalFlash(torch.autograd.Function):
    """q, k, v: B x H x N x d (N a multiple of w); k_summary, beta: B x H x C x d or None;
    own_bias, prev_bias: additive masks (1 x H x w x w) or None. Returns B x H x N x d."""

    @staticmethod
    def forward(ctx, q, k, v, k_summary, beta, own_bias, prev_bias, w, per_block, overlap, scale):
        B, H, N, d = q.shape
        config = (w, per_block, overlap)
        out = lse = None
        for blocks, qp, kp, vp, causal, mask, _ in _parts(q, k, v, k_summary, beta, own_bias, prev_bias, *config):
            o, l = _forward(qp, kp, vp, 0.0, causal, attn_mask=mask, scale=scale)
            o, l = o.unflatten(0, (B, -1)), l.unflatten(0, (B, -1))  # B x blocks x H x w (x d)
            if out is None:
                out, lse = o, l
            else:
                _join(out[:, blocks], lse[:, blocks], o, l)
        ctx.save_for_backward(q, k, v, k_summary, beta, own_bias, prev_bias, out, lse)
        ctx.config, ctx.scale = config, scale
        return out.transpose(2, 3).flatten(1, 2).transpose(1, 2)  # B x nb x H x w x d -> B x H x N x d

    @staticmethod
    def backward(ctx, grad):
        q, k, v, k_summary, beta, own_bias, prev_bias, out, lse = ctx.saved_tensors
        B, H, N, d = q.shape
        w = ctx.config[0]
        grad = grad.transpose(1, 2).unflatten(1, (N // w, w)).transpose(2, 3)  # B x nb x H x w x d
        dq = dk = dv = None
        d_summary = None if k_summary is None else torch.zeros_like(k_summary)
        d_beta = None if beta is None else torch.zeros_like(beta)
        for blocks, qp, kp, vp, causal, mask, keys in _parts(q, k, v, k_summary, beta, own_bias, prev_bias, *ctx.config):
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
        return dq, dk, dv, d_summary, d_beta, None, None, None, None, None, None


def causal_attention(q, k, v, k_summary, beta, own_bias, prev_bias, w, per_block, overlap, scale):
    return CausalFlash.apply(q, k, v, k_summary, beta, own_bias, prev_bias, w, per_block, overlap, scale)
