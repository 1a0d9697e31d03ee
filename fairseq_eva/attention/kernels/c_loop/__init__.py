"""The blockwise kernel on the CPU (float32) as one compiled C loop: per head and block of queries, the matrix
products (torch's own sgemm) and the softmax passes between them, while the block's logits are in cache.

It computes what blockwise.py computes group by group (the same logits, masks, bias, dropout mask and
backward formulas; see its docstring) without the Python between the steps, without copying [local keys ;
summaries] into one tensor (two products write the two column ranges of the logits), and with one block's
logits at a time (256 x 384 floats in the benchmarks), which stay in the core's cache for the passes. The
tests check it against the groups, mask for mask. It runs where torch's own library exports `sgemm_` (the
x86-64 Linux wheels, with MKL inside) and a C compiler is (build.py); the C source is cpu_kernel.c.
"""

import ctypes

import torch

from .. import blockwise, softmax_dropout
from ..contract import KernelSpec, register
from . import build
from .build import library


class _Layer(ctypes.Structure):
    """eva_layer of the C source."""

    _fields_ = [(name, ctypes.c_int64) for name in ("B", "H", "N", "d", "w", "offset", "width", "C")] + [
        (name, ctypes.c_void_p) for name in ("chunks_seen", "lengths", "chunk_ok", "bias")] + [
        ("scale", ctypes.c_float), ("keep", ctypes.c_float)] + [
        (name, ctypes.c_uint32) for name in ("threshold", "s0", "s1")] + [
        ("threads", ctypes.c_int), ("sgemm", ctypes.c_void_p)]


def _ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


class _Call:
    """The layer's description for the C loop, and the tensors it points into (kept alive with it)."""

    def __init__(self, q, k_summary, grid_bias, lengths, chunk_ok, layout, dropout, scale, seed):
        B, H, N, d = q.shape
        C = 0 if k_summary is None else k_summary.size(2)
        nb = N // layout.window
        self.keep_alive = [
            torch.tensor([layout.visible_chunks(b, C) for b in range(nb)], dtype=torch.int64),
            lengths.to(torch.int64).contiguous(),
            None if chunk_ok is None else chunk_ok.to(torch.uint8).contiguous(),
            None if grid_bias is None else grid_bias.contiguous(),
        ]
        s0, s1 = softmax_dropout.seed_words(seed)
        self.layer = _Layer(B, H, N, d, layout.window, layout.offset, layout.width, C,
                            *(_ptr(t) for t in self.keep_alive), scale, softmax_dropout.keep_scale(dropout),
                            softmax_dropout.threshold(dropout), s0, s1, torch.get_num_threads(), library()[1])


def _check(status, call):
    """The C loop returns -1 where a thread could not allocate its buffers (a block's logits and their gradient)."""
    if status != 0:
        layer = call.layer
        raise MemoryError(f"the C loop could not allocate its buffers: {layer.threads} threads x about "
                          f"{3 * layer.w * (layer.width + layer.C) * 4} bytes")


def _token_major(t):
    """t (B x H x N x d) as a view of contiguous B x N x H x d memory (a copy if it is not one)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def operands(q, k, v, k_summary, beta):
    """q, k, v token-major and the summaries contiguous, as the C loop reads them (views where they are)."""
    return (*map(_token_major, (q, k, v)), *(None if t is None else t.contiguous() for t in (k_summary, beta)))


def forward(q, k, v, k_summary, beta, bias, lengths, chunk_ok, layout, dropout, scale, seed):
    """(Y, lse): Y B x H x N x d (token-major), lse B x H x N. q, k, v token-major; k_summary, beta contiguous."""
    B, H, N, d = q.shape
    call = _Call(q, k_summary, bias, lengths, chunk_ok, layout, dropout, scale, seed)
    out = q.new_empty(B, N, H, d).transpose(1, 2)
    lse = q.new_empty(B, H, N)
    _check(library()[0].eva_forward(ctypes.byref(call.layer), *map(_ptr, (q, k, v, k_summary, beta, out, lse))), call)
    return out, lse


def backward(grad, q, k, v, k_summary, beta, bias, lse, lengths, chunk_ok, layout, dropout, scale, seed, bias_grad):
    """(dq, dk, dv, d_summary, d_beta, d_bias); grad token-major (a copy if not)."""
    B, H, N, d = q.shape
    call = _Call(q, k_summary, bias, lengths, chunk_ok, layout, dropout, scale, seed)
    grad = _token_major(grad)
    dq = q.new_empty(B, N, H, d).transpose(1, 2)
    dk, dv = (q.new_zeros(B, N, H, d).transpose(1, 2) for _ in range(2))
    d_summary = None if k_summary is None else torch.zeros_like(k_summary)
    d_beta = None if beta is None else torch.zeros_like(beta)
    d_bias = q.new_zeros(bias.shape) if bias_grad else None
    status = library()[0].eva_backward(ctypes.byref(call.layer), *map(_ptr, (q, k, v, k_summary, beta, grad, lse, dq, dk, dv,
                                                                             d_summary, d_beta, d_bias)))
    _check(status, call)
    return dq, dk, dv, d_summary, d_beta, d_bias


C_LOOP = blockwise.Implementation(operands, forward, backward)


def attention(**call):
    """The kernel contract (contract.py): the blockwise kernel's autograd function, run by the C loop."""
    return blockwise.attention(**call, implementation=C_LOOP)


register(KernelSpec(
    name="c_loop",
    run=attention,
    devices=frozenset({"cpu"}),
    dtypes=frozenset({torch.float32}),
    unavailable=build.unavailable,
    compiles=False,  # a C extension loaded from disk at its first call
    summary="the blockwise kernel as one compiled C loop calling torch's sgemm: float32 on the CPU, everything; the "
            "fastest there",
))
