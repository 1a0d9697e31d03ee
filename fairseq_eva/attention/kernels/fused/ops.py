"""torch's fused attention kernels as EVA's fused kernels call them: one call returns the output and each
query's log-sum-exp, and its backward takes them (with the joint output and log-sum-exp, when parts of one
softmax are joined, causal.py).

- CPU: torch's fused CPU kernel. No dropout, no bias gradient: evaluation, or training with a frozen RPE.
- CUDA: torch's memory-efficient kernel. It takes attention dropout (its philox state replays the mask in
  the backward) and returns the gradient of an additive bias: the paper's settings.
"""

import math

import torch
import torch.nn.functional as F

# CUDA: queries x summaries of one call of the causal chunk part. On an H200 (bfloat16, N = 32768, window 128,
# chunks of 8) 2**24 took 15 ms a layer against 21 ms at 2**22 and 58 ms at 2**20; 2**26 was no faster, with more
# memory.
GROUP_LOGITS = 2**24


class CPUOps:
    """torch's fused CPU kernel: (out, lse) forward, (dq, dk, dv) backward."""

    forward_op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward_op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    trains_bias_and_dropout = False
    group_logits = 0  # one call per block for the chunk part

    @classmethod
    def available(cls, q):
        return cls.forward_op is not None

    @classmethod
    def forward(cls, q, k, v, bias, causal, dropout, scale):
        out, lse = cls.forward_op(q, k, v, 0.0, causal, attn_mask=bias, scale=scale)
        return out, lse, None

    @classmethod
    def backward(cls, grad, q, k, v, bias, out, lse, state, causal, dropout, scale, bias_grad):
        dq, dk, dv = cls.backward_op(grad, q, k, v, out, lse, 0.0, causal, attn_mask=bias, scale=scale)
        return dq, dk, dv, None


class CUDAOps:
    """torch's memory-efficient CUDA kernel, with dropout and the bias gradient. Every call gets a bias (the
    causal mask in it): its rows padded to 16 elements, as the kernel reads them aligned."""

    forward_op = getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", None)
    backward_op = getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention_backward", None)
    trains_bias_and_dropout = True
    group_logits = GROUP_LOGITS

    @classmethod
    def available(cls, q):
        return cls.forward_op is not None and q.dtype in (torch.float16, torch.bfloat16, torch.float32) and q.size(-1) % 8 == 0

    @staticmethod
    def _bias(bias, q, k):
        """bias (broadcasting to B x H x L x S; None: zeros) as the kernel reads it: q's dtype, rows of a
        multiple of 16."""
        S = k.size(-2)
        bias = q.new_zeros(1, S) if bias is None else bias
        aligned = bias.new_empty(*bias.shape[:-1], 16 * math.ceil(S / 16), dtype=q.dtype)[..., :S]
        return aligned.copy_(bias).expand(q.size(0), q.size(1), q.size(2), S)

    @classmethod
    def forward(cls, q, k, v, bias, causal, dropout, scale):
        bias = cls._bias(bias, q, k)
        out, lse, seed, offset = cls.forward_op(q, k, v, bias, True, dropout, False, scale=scale)
        return out, lse[..., : q.size(-2)], (seed, offset)

    @classmethod
    def backward(cls, grad, q, k, v, bias, out, lse, state, causal, dropout, scale, bias_grad):
        L = q.size(-2)
        lse = F.pad(lse, (0, 32 * math.ceil(L / 32) - L)).contiguous()  # the kernel's own padding of l
        dq, dk, dv, d_bias = cls.backward_op(grad.contiguous(), q, k, v, cls._bias(bias, q, k), out, lse, *state, dropout,
                                             [True, True, True, bias_grad], False, scale=scale)
        return dq, dk, dv, d_bias


OPS = {"cpu": CPUOps, "cuda": CUDAOps}


def refusal(q, *, dropout, bias_grad):
    """Why torch's fused kernel on q's device cannot compute this call (every reason, joined by "; "), or None."""
    ops = OPS.get(q.device.type)
    if ops is None or not ops.available(q):
        return f"torch has no fused kernel for {q.dtype} (head dim {q.size(-1)}) on {q.device.type}"
    reasons = []
    if not ops.trains_bias_and_dropout and dropout > 0:
        reasons.append(f"torch's fused {q.device.type.upper()} kernel takes no attention dropout")
    if not ops.trains_bias_and_dropout and bias_grad:
        reasons.append(f"torch's fused {q.device.type.upper()} kernel gives no gradient to a trainable relative position bias")
    return "; ".join(reasons) or None


class FusedCall(torch.autograd.Function):
    """One call of a fused kernel, q: L x H x M x d against k, v: L x H x S x d and an additive bias that
    broadcasts to L x H x M x S; returns (out, lse), lse without gradient. The bias gets its gradient (summed
    over what it broadcasts over) where the ops give one."""

    @staticmethod
    def forward(ctx, q, k, v, bias, ops, dropout, scale):
        out, lse, state = ops.forward(q, k, v, bias, False, dropout, scale)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.ops, ctx.state, ctx.dropout, ctx.scale = ops, state, dropout, scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad, grad_lse):
        q, k, v, bias, out, lse = ctx.saved_tensors
        bias_grad = bias is not None and ctx.needs_input_grad[3]
        dq, dk, dv, d_bias = ctx.ops.backward(grad, q, k, v, bias, out, lse, ctx.state, False, ctx.dropout, ctx.scale,
                                              bias_grad)
        if bias_grad:
            d_bias = d_bias.sum_to_size(bias.shape).to(bias.dtype)
        return dq, dk, dv, d_bias if bias_grad else None, None, None, None
