"""The Triton kernel as a torch custom op with a fake (for torch.compile) and an autograd formula.

The layout travels as plain ints (window, offset, width, causal, overlap, chunks_per_block) so that the op's
schema holds nothing but tensors and scalars; the dropout seed is a 1-element int64 tensor on q's device.
block_m / block_n choose the tiling (0: autotuned on a GPU for the forward, dQ and dK dV, the defaults below otherwise);
they change neither the output nor the dropout mask, which the tests check.
"""

import functools
import os
from typing import Optional, Tuple

import torch
from torch import Tensor

# Tiles for head dim 64 on a GPU: the FlashAttention-2 Triton forward's 128 x 64 with 4 warps (64 x 64 for float32,
# whose 128-row forward needs 192 KiB of shared memory on sm_90, more than an A100 has), and 64 x 64 for the
# backward programs, which hold more tiles at once. A query tile never spans two blocks (see _tiles).
FORWARD_TILE = (128, 64)
FORWARD_TILE_FP32 = (64, 64)
BACKWARD_TILE = (64, 64)
NUM_WARPS = 4
MIN_DOT = 16
# on a GPU the forward, dQ and dK dV programs pick their tiles by triton.autotune (forward.py, backward.py) unless a call
# names them; the interpreter runs the fixed ones
TUNED = os.environ.get("TRITON_INTERPRET") != "1"


def _pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


def _tiles(block_m, block_n, window):
    """(query rows, keys) of a tile: a query tile is cut down to the window; on a GPU both are 16 at least (the
    smallest tl.dot), under the interpreter any power of two (the tests' tiny tilings)."""
    smallest = 1 if os.environ.get("TRITON_INTERPRET") == "1" else MIN_DOT
    return max(smallest, min(block_m, _pow2(window))), max(smallest, block_n)


def _aligned(window, offset, width, block_n):
    """Whether every key tile starts at a multiple of 4 (in block columns and summaries), so that the programs
    draw dropout once per four keys (tiles.dropout_keep)."""
    return window % 4 == 0 and offset % 4 == 0 and width % 4 == 0 and block_n % 4 == 0


def _strides(t):
    """(batch, head, position) strides of a B x H x L x d tensor whose last dim is contiguous."""
    return t.stride(0), t.stride(1), t.stride(2)


def _last_contiguous(t):
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def _launch_args(q, k, v, k_summary, beta, chunk_ok, rpe, lengths):
    """Pointers (dummies for absent inputs, which the constexpr flags switch off) and their strides."""
    B, H, N, d = q.shape
    C = 0 if k_summary is None else k_summary.size(2)
    ks = q if k_summary is None else k_summary
    bt = q if beta is None else beta
    ok = q if chunk_ok is None else chunk_ok.to(torch.int8).contiguous()
    table = q if rpe is None else rpe.contiguous()
    return (ks, bt, ok, table), _strides(ks) + _strides(bt), C


def _lengths(lengths, B, N, device):
    """The rows' lengths as int32 (all N when None)."""
    if lengths is None:
        return torch.full((B,), N, dtype=torch.int32, device=device)
    return lengths.to(device=device, dtype=torch.int32)


def forward(q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, window, offset, width, causal, overlap, chunks_per_block,
            dropout, scale, block_m=0, block_n=0):
    """(y, lse): y B x H x N x d in q's dtype (a view of B x N x H x d memory), lse B x H x N float32."""
    import triton

    from .forward import eva_forward, eva_forward_tuned
    from .tiles import LOG2E

    q, k, v, k_summary, beta = (_last_contiguous(t) for t in (q, k, v, k_summary, beta))
    B, H, N, d = q.shape
    (ks, bt, ok, table), summary_strides, C = _launch_args(q, k, v, k_summary, beta, chunk_ok, rpe, lengths)
    y = q.new_empty(B, N, H, d).transpose(1, 2)
    lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
    tile = FORWARD_TILE_FP32 if q.dtype == torch.float32 else FORWARD_TILE
    _launch(eva_forward, eva_forward_tuned, lambda bm, bn: (N // window * triton.cdiv(window, bm), B * H),
            _tiles(block_m or tile[0], block_n or tile[1], window) if block_m or block_n or not TUNED else None,
            q, k, v, ks, bt, ok, table, _lengths(lengths, B, N, q.device), seed, y, lse,
            *_strides(q), *_strides(k), *_strides(v), *summary_strides, *_strides(y),
            H, N, C, d, float(dropout), scale * LOG2E.value,
            WINDOW=window, OFFSET=offset, WIDTH=width, CAUSAL=causal, OVERLAP=int(overlap),
            CHUNKS_PER_BLOCK=chunks_per_block, NUM_OFFSETS=window + width - 1, HAS_RPE=rpe is not None,
            HAS_OK=chunk_ok is not None, DROPOUT=dropout > 0, BLOCK_D=max(MIN_DOT, _pow2(d)))
    return y, lse


def _launch(program, tuned, grid, tiles, *args, **flags):
    """program on grid(BLOCK_M, BLOCK_N) with the given tiles, or autotuned (tiles None); ALIGNED from the key tile
    (every tuned one is a multiple of 16)."""
    aligned = _aligned(flags["WINDOW"], flags["OFFSET"], flags["WIDTH"], MIN_DOT if tiles is None else tiles[1])
    if tiles is None:
        tuned[lambda meta: grid(meta["BLOCK_M"], meta["BLOCK_N"])](*args, **flags, ALIGNED=aligned)
    else:
        program[grid(*tiles)](*args, **flags, ALIGNED=aligned, BLOCK_M=tiles[0], BLOCK_N=tiles[1], num_warps=NUM_WARPS)


def dropout_keep_mask(rows, keys, dropout, seed, device):
    """rows x keys bool: the dropout mask the kernel draws for query rows (b H + h) N + n and keys (local column j,
    then width + c). Each program draws it on its own; this is for checking them against a replay."""
    from .tiles import dropout_mask

    out = torch.empty(rows, keys, dtype=torch.int8, device=device)
    seed = torch.tensor([seed], dtype=torch.int64, device=device) if isinstance(seed, int) else seed.to(device)
    dropout_mask[(rows,)](out, seed, float(dropout), keys, BLOCK=_pow2(keys))
    return out.bool()


# the backward's partial sums (d k~ and d beta; the bias gradient) are split over this many programs at most
PROGRAMS = 512


def _splits(tasks, programs):
    return max(1, min(tasks, PROGRAMS // max(1, programs)))


def table_gradient(d_grid, window, width):
    """H x w x width (query i, local column j) -> H x (w + width - 1), summed by offset j - i + w - 1.
    Row i is shifted right by w - 1 - i through a reshape (the relative-shift trick): no scatter, no atomics."""
    H = d_grid.size(0)
    flipped = d_grid.flip(1)  # row r = w - 1 - i must move right by r
    padded = torch.nn.functional.pad(flipped, (0, window)).flatten(1)  # H x w (width + w)
    skewed = padded[:, : window * (width + window - 1)].view(H, window, width + window - 1)
    return skewed.sum(1)


def backward(grad, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, y, lse, window, offset, width, causal, overlap,
             chunks_per_block, dropout, scale, rpe_grad, block_m=0, block_n=0):
    """(dq, dk, dv, d k~, d beta, d rpe): the last three None where absent (d rpe also when not rpe_grad)."""
    import triton

    from .backward import (
        eva_backward_dgrid,
        eva_backward_dkdv,
        eva_backward_dkdv_tuned,
        eva_backward_dq,
        eva_backward_dq_tuned,
        eva_backward_dsummary,
    )
    from .tiles import LOG2E

    q, k, v, k_summary, beta, grad, y = (_last_contiguous(t) for t in (q, k, v, k_summary, beta, grad, y))
    B, H, N, d = q.shape
    (ks, bt, ok, table), summary_strides, C = _launch_args(q, k, v, k_summary, beta, chunk_ok, rpe, lengths)
    lengths = _lengths(lengths, B, N, q.device)
    bm, bn = _tiles(block_m or BACKWARD_TILE[0], block_n or BACKWARD_TILE[1], window)
    bd = max(MIN_DOT, _pow2(d))
    # empty_like, as the fake says: for the layer's q, k, v (views with gaps of one B x N x 3 x H x d product) a dense
    # layout of other strides, which the programs are given
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    delta = torch.empty_like(lse)
    flags = dict(WINDOW=window, WIDTH=width, CAUSAL=causal, DROPOUT=dropout > 0, ALIGNED=_aligned(window, offset, width, bn),
                 BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, num_warps=NUM_WARPS)
    common = (H, N)
    drop = float(dropout)
    _launch(eva_backward_dq, eva_backward_dq_tuned, lambda bm, bn: (N // window * triton.cdiv(window, bm), B * H),
            (bm, bn) if block_m or block_n or not TUNED else None,
            q, k, v, ks, bt, ok, table, lengths, seed, y, grad, lse, delta, dq,
            *_strides(q), *_strides(k), *_strides(v), *summary_strides, *_strides(y), *_strides(grad), *_strides(dq),
            *common, C, d, drop, scale, scale * LOG2E.value,
            WINDOW=window, OFFSET=offset, WIDTH=width, CAUSAL=causal, OVERLAP=int(overlap), CHUNKS_PER_BLOCK=chunks_per_block,
            NUM_OFFSETS=window + width - 1, HAS_RPE=rpe is not None, HAS_OK=chunk_ok is not None, DROPOUT=dropout > 0,
            BLOCK_D=bd)
    _launch(eva_backward_dkdv, eva_backward_dkdv_tuned, lambda bm, bn: (triton.cdiv(N, bn), B * H),
            (bm, bn) if block_m or block_n or not TUNED else None,
            q, k, v, table, lengths, seed, grad, lse, delta, dk, dv,
            *_strides(q), *_strides(k), *_strides(v), *_strides(grad), *_strides(dk), *_strides(dv),
            *common, d, drop, scale, scale * LOG2E.value,
            WINDOW=window, OFFSET=offset, WIDTH=width, CAUSAL=causal, NUM_OFFSETS=window + width - 1,
            HAS_RPE=rpe is not None, DROPOUT=dropout > 0, BLOCK_D=bd)
    d_summary = d_beta = d_rpe = None
    if C:
        tiles = triton.cdiv(C, bn)
        splits = _splits(N // window, tiles * B * H)
        partial = [torch.empty(splits, B, H, C, d, dtype=torch.float32, device=q.device) for _ in range(2)]
        eva_backward_dsummary[(tiles, B * H, splits)](
            q, ks, bt, ok, seed, grad, lse, delta, partial[0], partial[1],
            *_strides(q), *summary_strides, *_strides(grad),
            B, *common, C, d, drop, scale, scale * LOG2E.value,
            OVERLAP=int(overlap), CHUNKS_PER_BLOCK=chunks_per_block, HAS_OK=chunk_ok is not None, **flags,
        )
        d_summary, d_beta = (t.sum(0).to(k_summary.dtype) for t in partial)
    if rpe is not None and rpe_grad:
        tiles = triton.cdiv(window, bm) * triton.cdiv(width, bn)
        splits = _splits(B * (N // window), tiles * H)
        d_grid = torch.empty(splits, H, window, width, dtype=torch.float32, device=q.device)
        eva_backward_dgrid[(tiles, H, splits)](
            q, k, v, table, lengths, seed, grad, lse, delta, d_grid,
            *_strides(q), *_strides(k), *_strides(v), *_strides(grad),
            B, *common, d, drop, scale * LOG2E.value,
            OFFSET=offset, NUM_OFFSETS=window + width - 1, **flags,
        )
        d_rpe = table_gradient(d_grid.sum(0), window, width).to(rpe.dtype)
    return dq, dk, dv, d_summary, d_beta, d_rpe


@torch.library.custom_op("fairseq_eva::triton_attention", mutates_args=())
def attention_op(
    q: Tensor, k: Tensor, v: Tensor, k_summary: Optional[Tensor], beta: Optional[Tensor], chunk_ok: Optional[Tensor],
    rpe: Optional[Tensor], lengths: Optional[Tensor], seed: Tensor, window: int, offset: int, width: int, causal: bool,
    overlap: bool, chunks_per_block: int, dropout: float, scale: float, block_m: int, block_n: int,
) -> Tuple[Tensor, Tensor]:
    return forward(q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, window, offset, width, causal, overlap,
                   chunks_per_block, dropout, scale, block_m, block_n)


@attention_op.register_fake
def _(q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, window, offset, width, causal, overlap, chunks_per_block,
      dropout, scale, block_m, block_n):
    B, H, N, d = q.shape
    return q.new_empty(B, N, H, d).transpose(1, 2), q.new_empty(B, H, N, dtype=torch.float32)


@torch.library.custom_op("fairseq_eva::triton_attention_backward", mutates_args=())
def attention_backward_op(
    grad: Tensor, q: Tensor, k: Tensor, v: Tensor, k_summary: Optional[Tensor], beta: Optional[Tensor],
    chunk_ok: Optional[Tensor], rpe: Optional[Tensor], lengths: Optional[Tensor], seed: Tensor, y: Tensor, lse: Tensor,
    window: int, offset: int, width: int, causal: bool, overlap: bool, chunks_per_block: int, dropout: float, scale: float,
    rpe_grad: bool, block_m: int, block_n: int,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, d k~, d beta, d rpe); an absent gradient is an empty tensor (a custom op returns no None)."""
    grads = backward(grad, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, y, lse, window, offset, width, causal,
                     overlap, chunks_per_block, dropout, scale, rpe_grad, block_m, block_n)
    return tuple(q.new_empty(0) if g is None else g for g in grads)


@attention_backward_op.register_fake
def _(grad, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, y, lse, window, offset, width, causal, overlap,
      chunks_per_block, dropout, scale, rpe_grad, block_m, block_n):
    # contiguous, as the real op's sums over partials are
    summaries = [q.new_empty(0)] * 2 if k_summary is None else [k_summary.new_empty(k_summary.shape) for _ in range(2)]
    d_rpe = rpe.new_empty(rpe.shape) if rpe is not None and rpe_grad else q.new_empty(0)
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), *summaries, d_rpe)


def _setup_context(ctx, inputs, output):
    q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, *layout = inputs
    ctx.save_for_backward(q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, *output)
    ctx.layout = layout  # window ... block_n, the op's scalars
    ctx.set_materialize_grads(False)  # lse's gradient stays None: no tensor of zeros made for it each call


def _backward(ctx, grad, grad_lse):
    """lse is not differentiable (its gradient is ignored): the layer uses only y."""
    if grad is None:  # y was not used either
        return (None,) * (9 + len(ctx.layout))
    q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, y, lse = ctx.saved_tensors
    *layout, block_m, block_n = ctx.layout
    grads = attention_backward_op(grad, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, y, lse, *layout,
                                  rpe is not None and ctx.needs_input_grad[6], block_m, block_n)
    present = (True, True, True, k_summary is not None, beta is not None, rpe is not None and ctx.needs_input_grad[6])
    dq, dk, dv, d_summary, d_beta, d_rpe = (g if keep else None for g, keep in zip(grads, present))
    return (dq, dk, dv, d_summary, d_beta, None, d_rpe, None, None, *[None] * len(ctx.layout))  # the op's inputs' order


attention_op.register_autograd(_backward, setup_context=_setup_context)


@functools.lru_cache(maxsize=None)
def _zero_seed(device):
    return torch.zeros(1, dtype=torch.int64, device=device)


def triton_attention(*, layout, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, dropout, seed, scale, block_m=0, block_n=0):
    """The contract (contract.py) on the Triton kernel; block_m, block_n choose the tiling (0: tuned or the defaults).
    seed: a 1-element int64 tensor on q's device, or None without dropout (a zero kept per device: no copy a call);
    an int is put on the device, one copy."""
    N = q.size(2)
    if N % layout.window:
        raise ValueError(f"the Triton kernel needs the length ({N}) to be a multiple of the window ({layout.window})")
    if layout.offset > 0:
        raise ValueError(f"the Triton kernel takes local keys that start at or before their block (offset {layout.offset})")
    if rpe is not None and tuple(rpe.shape) != (q.size(1), layout.num_offsets):
        raise ValueError(f"the RPE table must be heads x {layout.num_offsets} (layout.num_offsets), not {tuple(rpe.shape)}")
    k, v = k.to(q.dtype), v.to(q.dtype)
    if k_summary is not None:  # autocast: one dtype for the matrix products
        k_summary, beta = k_summary.to(q.dtype), beta.to(q.dtype)
    if lengths is not None:
        lengths = lengths.to(device=q.device, dtype=torch.int32)
    if seed is None:
        seed = _zero_seed(q.device)
    elif not isinstance(seed, torch.Tensor):
        seed = torch.tensor([seed], dtype=torch.int64, device=q.device)
    y, lse = attention_op(q, k, v, k_summary, beta, chunk_ok, rpe, lengths, seed, layout.window, layout.offset,
                          layout.width, layout.causal, layout.overlap, layout.chunks_per_block, float(dropout), float(scale),
                          block_m, block_n)
    return y, lse.detach()
