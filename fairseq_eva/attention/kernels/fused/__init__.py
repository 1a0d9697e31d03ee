"""The "fused" kernel: torch's fused attention kernels (ops.py), over blocks (bidirectional.py) or in parts
joined by their log-sum-exp (causal.py). On CUDA they take dropout and a bias gradient, on the CPU neither."""

import torch

from ..contract import KernelSpec, register
from . import bidirectional, causal, ops


def attention(*, layout, **call):
    """The kernel contract (contract.py): bidirectional.py or causal.py by the layout."""
    return (causal if layout.causal else bidirectional).attention(layout=layout, **call)


def _check(q, *, layout, needs_grad, dropout, bias_grad, bias_grid):
    return ops.refusal(q, dropout=dropout, bias_grad=bias_grad)


register(KernelSpec(
    name="fused",
    run=attention,
    devices=frozenset({"cpu", "cuda"}),
    dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64}),
    check=_check,
    summary="torch's fused attention kernels over blocks with additive masks of shape (block, keys); on CUDA the "
            "memory-efficient kernel (dropout, bias gradient), on the CPU evaluation or a frozen RPE only; causal "
            "layouts take no lengths or chunk_ok",
))
