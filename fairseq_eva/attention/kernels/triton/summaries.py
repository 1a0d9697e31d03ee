"""EVA's chunk summaries (chunks.py) in Triton: two programs forward, two backward, one per (chunk, batch x head).

Chunk c of row b holds positions [c s_b, min((c + 1) s_b, L_b)) (s_b its chunk size, L_b its length; pads come
after L_b), as ChunkSummaries.segmented's chunk ids say. The proposal sigma (Linear + LayerNorm) and omega's noise
stay torch ops between the two forward programs:

- chunk_means: the means of q and k over each chunk (0 for an empty chunk);
- chunk_beta: beta_c = sum_m softmax_m((omega_c . k_m - |k_m|^2 / 2) / sqrt(d)) v_m, an online softmax over the
  chunk's positions, and its log-normaliser for the backward.

Each is a torch custom op with a fake and an autograd formula whose backward is one program as well; every
gradient row belongs to one chunk, so no atomics. Runs on CUDA, and on the CPU under Triton's interpreter; imported
only where Triton is (chunks.py).
"""

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_S = 32  # positions a loop step


def _pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


@triton.jit
def chunk_span(LENGTHS, SIZES, b, c, N, size, HAS_LENGTHS: tl.constexpr, HAS_SIZES: tl.constexpr):
    """[first, last) of chunk c of row b."""
    length = N
    if HAS_LENGTHS:
        length = tl.load(LENGTHS + b)
    if HAS_SIZES:
        size = tl.load(SIZES + b)
    first = c * size
    return first, tl.maximum(tl.minimum(first + size, length), first)

@triton.jit
def means_program(Q, K, LENGTHS, SIZES, QM, KM, sqb, sqh, sqn, skb, skh, skn, H, N, C, d, size,
          HAS_LENGTHS: tl.constexpr, HAS_SIZES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    c, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    first, last = chunk_span(LENGTHS, SIZES, b, c, N, size, HAS_LENGTHS, HAS_SIZES)
    dd = tl.arange(0, BLOCK_D)
    q_sum = tl.zeros([BLOCK_D], tl.float32)
    k_sum = tl.zeros([BLOCK_D], tl.float32)
    for start in range(first, last, BLOCK_S):
        m = start + tl.arange(0, BLOCK_S)
        mask = (m < last)[:, None] & (dd < d)[None, :]
        q_sum += tl.sum(tl.load(Q + b * sqb + h * sqh + m[:, None] * sqn + dd[None, :], mask=mask, other=0.0), 0)
        k_sum += tl.sum(tl.load(K + b * skb + h * skh + m[:, None] * skn + dd[None, :], mask=mask, other=0.0), 0)
    count = tl.maximum(last - first, 1).to(tl.float32)
    out = (bh.to(tl.int64) * C + c) * d + dd
    tl.store(QM + out, (q_sum / count).to(QM.dtype.element_ty), mask=dd < d)
    tl.store(KM + out, (k_sum / count).to(KM.dtype.element_ty), mask=dd < d)

@triton.jit
def means_backward_program(DQM, DKM, LENGTHS, SIZES, DQ, DK, sqb, sqh, sqn, skb, skh, skn, H, N, C, d, size,
                   HAS_LENGTHS: tl.constexpr, HAS_SIZES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    c, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    first, last = chunk_span(LENGTHS, SIZES, b, c, N, size, HAS_LENGTHS, HAS_SIZES)
    dd = tl.arange(0, BLOCK_D)
    count = tl.maximum(last - first, 1).to(tl.float32)
    row = (bh.to(tl.int64) * C + c) * d + dd
    dq = tl.load(DQM + row, mask=dd < d, other=0.0).to(tl.float32) / count
    dk = tl.load(DKM + row, mask=dd < d, other=0.0).to(tl.float32) / count
    for start in range(first, last, BLOCK_S):
        m = start + tl.arange(0, BLOCK_S)
        mask = (m < last)[:, None] & (dd < d)[None, :]
        tl.store(DQ + b * sqb + h * sqh + m[:, None] * sqn + dd[None, :],
                 tl.broadcast_to(dq[None, :], (BLOCK_S, BLOCK_D)).to(DQ.dtype.element_ty), mask=mask)
        tl.store(DK + b * skb + h * skh + m[:, None] * skn + dd[None, :],
                 tl.broadcast_to(dk[None, :], (BLOCK_S, BLOCK_D)).to(DK.dtype.element_ty), mask=mask)

@triton.jit
def log_weights(k, omega, scale):
    """(omega . k_m - |k_m|^2 / 2) / sqrt(d) of a tile of positions k (BLOCK_S x BLOCK_D, float32)."""
    return (tl.sum(k * omega[None, :], 1) - 0.5 * tl.sum(k * k, 1)) * scale

@triton.jit
def beta_program(K, V, OMEGA, LENGTHS, SIZES, BETA, LSE, skb, skh, skn, svb, svh, svn, H, N, C, d, size, scale,
         HAS_LENGTHS: tl.constexpr, HAS_SIZES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    c, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    first, last = chunk_span(LENGTHS, SIZES, b, c, N, size, HAS_LENGTHS, HAS_SIZES)
    dd = tl.arange(0, BLOCK_D)
    row = (bh.to(tl.int64) * C + c) * d + dd
    omega = tl.load(OMEGA + row, mask=dd < d, other=0.0).to(tl.float32)
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for start in range(first, last, BLOCK_S):
        m = start + tl.arange(0, BLOCK_S)
        mask = (m < last)[:, None] & (dd < d)[None, :]
        k = tl.load(K + b * skb + h * skh + m[:, None] * skn + dd[None, :], mask=mask, other=0.0).to(tl.float32)
        v = tl.load(V + b * svb + h * svh + m[:, None] * svn + dd[None, :], mask=mask, other=0.0).to(tl.float32)
        s = tl.where(m < last, log_weights(k, omega, scale), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))  # finite: the tile holds a position of the chunk
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    seen = l_i > 0  # an empty chunk: beta 0, as the torch path's sums give
    tl.store(BETA + row, (acc / tl.where(seen, l_i, 1.0)).to(BETA.dtype.element_ty), mask=dd < d)
    tl.store(LSE + bh.to(tl.int64) * C + c, tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), 0.0))

@triton.jit
def beta_backward_program(DBETA, K, V, OMEGA, BETA, LSE, LENGTHS, SIZES, DK, DV, DOMEGA,
                  skb, skh, skn, svb, svh, svn, H, N, C, d, size, scale,
                  HAS_LENGTHS: tl.constexpr, HAS_SIZES: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """With a_m the weights: dv_m = a_m dbeta, dl_m = a_m (dbeta . v_m - dbeta . beta),
    dk_m = dl_m (omega - k_m) / sqrt(d), d omega = sum_m dl_m k_m / sqrt(d)."""
    c, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    first, last = chunk_span(LENGTHS, SIZES, b, c, N, size, HAS_LENGTHS, HAS_SIZES)
    dd = tl.arange(0, BLOCK_D)
    row = (bh.to(tl.int64) * C + c) * d + dd
    omega = tl.load(OMEGA + row, mask=dd < d, other=0.0).to(tl.float32)
    dbeta = tl.load(DBETA + row, mask=dd < d, other=0.0).to(tl.float32)
    mean_term = tl.sum(dbeta * tl.load(BETA + row, mask=dd < d, other=0.0).to(tl.float32), 0)
    lse = tl.load(LSE + bh.to(tl.int64) * C + c)
    domega = tl.zeros([BLOCK_D], tl.float32)
    for start in range(first, last, BLOCK_S):
        m = start + tl.arange(0, BLOCK_S)
        mask = (m < last)[:, None] & (dd < d)[None, :]
        k_at = b * skb + h * skh + m[:, None] * skn + dd[None, :]
        v_at = b * svb + h * svh + m[:, None] * svn + dd[None, :]
        k = tl.load(K + k_at, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(V + v_at, mask=mask, other=0.0).to(tl.float32)
        a = tl.where(m < last, tl.exp(log_weights(k, omega, scale) - lse), 0.0)
        dl = a * (tl.sum(v * dbeta[None, :], 1) - mean_term) * scale
        tl.store(DV + v_at, (a[:, None] * dbeta[None, :]).to(DV.dtype.element_ty), mask=mask)
        tl.store(DK + k_at, (dl[:, None] * (omega[None, :] - k)).to(DK.dtype.element_ty), mask=mask)
        domega += tl.sum(dl[:, None] * k, 0)
    tl.store(DOMEGA + row, domega, mask=dd < d)


def _strides(t):
    return t.stride(0), t.stride(1), t.stride(2)


def _last_contiguous(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _pointers(lengths, sizes, fallback):
    return (fallback if lengths is None else lengths, fallback if sizes is None else sizes)


@torch.library.custom_op("fairseq_eva::chunk_means", mutates_args=())
def chunk_means_op(q: Tensor, k: Tensor, lengths: Optional[Tensor], sizes: Optional[Tensor], size: int,
                   chunks: int) -> Tuple[Tensor, Tensor]:
    """The means of q and of k over each chunk, B x H x chunks x d each (float32 for float64 inputs too)."""
    q, k = _last_contiguous(q), _last_contiguous(k)
    B, H, N, d = q.shape
    q_mean = q.new_empty(B, H, chunks, d)
    k_mean = k.new_empty(B, H, chunks, d)
    if chunks:
        means_program[(chunks, B * H)](q, k, *_pointers(lengths, sizes, q), q_mean, k_mean, *_strides(q), *_strides(k),
                                H, N, chunks, d, size, HAS_LENGTHS=lengths is not None, HAS_SIZES=sizes is not None,
                                BLOCK_S=BLOCK_S, BLOCK_D=_pow2(d))
    return q_mean, k_mean


@chunk_means_op.register_fake
def _(q, k, lengths, sizes, size, chunks):
    B, H, _, d = q.shape
    return q.new_empty(B, H, chunks, d), k.new_empty(B, H, chunks, d)


@torch.library.custom_op("fairseq_eva::chunk_means_backward", mutates_args=())
def chunk_means_backward_op(dq_mean: Tensor, dk_mean: Tensor, q: Tensor, k: Tensor, lengths: Optional[Tensor],
                            sizes: Optional[Tensor], size: int) -> Tuple[Tensor, Tensor]:
    B, H, N, d = q.shape
    chunks = dq_mean.size(2)
    dq, dk = torch.zeros_like(q), torch.zeros_like(k)  # pads get no gradient
    if chunks:
        means_backward_program[(chunks, B * H)](dq_mean.contiguous(), dk_mean.contiguous(), *_pointers(lengths, sizes, q), dq, dk,
                                         *_strides(dq), *_strides(dk), H, N, chunks, d, size,
                                         HAS_LENGTHS=lengths is not None, HAS_SIZES=sizes is not None,
                                         BLOCK_S=BLOCK_S, BLOCK_D=_pow2(d))
    return dq, dk


@chunk_means_backward_op.register_fake
def _(dq_mean, dk_mean, q, k, lengths, sizes, size):
    return torch.empty_like(q), torch.empty_like(k)


def _means_setup(ctx, inputs, output):
    q, k, lengths, sizes, size, _ = inputs
    ctx.save_for_backward(q, k, lengths, sizes)
    ctx.size = size


def _means_grad(ctx, dq_mean, dk_mean):
    q, k, lengths, sizes = ctx.saved_tensors
    dq, dk = chunk_means_backward_op(dq_mean, dk_mean, q, k, lengths, sizes, ctx.size)
    return dq, dk, None, None, None, None


chunk_means_op.register_autograd(_means_grad, setup_context=_means_setup)


@torch.library.custom_op("fairseq_eva::chunk_beta", mutates_args=())
def chunk_beta_op(k: Tensor, v: Tensor, omega: Tensor, lengths: Optional[Tensor], sizes: Optional[Tensor], size: int,
                  scale: float) -> Tuple[Tensor, Tensor]:
    """(beta B x H x chunks x d in v's dtype, the log-normaliser B x H x chunks float32)."""
    k, v, omega = _last_contiguous(k), _last_contiguous(v), omega.contiguous()
    B, H, N, d = k.shape
    chunks = omega.size(2)
    beta = v.new_empty(B, H, chunks, d)
    lse = torch.empty(B, H, chunks, dtype=torch.float32, device=k.device)
    if chunks:
        beta_program[(chunks, B * H)](k, v, omega, *_pointers(lengths, sizes, k), beta, lse, *_strides(k), *_strides(v),
                               H, N, chunks, d, size, scale, HAS_LENGTHS=lengths is not None,
                               HAS_SIZES=sizes is not None, BLOCK_S=BLOCK_S, BLOCK_D=_pow2(d))
    return beta, lse


@chunk_beta_op.register_fake
def _(k, v, omega, lengths, sizes, size, scale):
    B, H, _, d = k.shape
    chunks = omega.size(2)
    return v.new_empty(B, H, chunks, d), k.new_empty(B, H, chunks, dtype=torch.float32)


@torch.library.custom_op("fairseq_eva::chunk_beta_backward", mutates_args=())
def chunk_beta_backward_op(d_beta: Tensor, k: Tensor, v: Tensor, omega: Tensor, beta: Tensor, lse: Tensor,
                           lengths: Optional[Tensor], sizes: Optional[Tensor], size: int,
                           scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """(dk, dv, d omega)."""
    k, v = _last_contiguous(k), _last_contiguous(v)
    d_beta, omega, beta = d_beta.contiguous(), omega.contiguous(), beta.contiguous()
    B, H, N, d = k.shape
    chunks = omega.size(2)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)  # pads get no gradient; the fake's layout
    # the program indexes k and dk (v and dv) with one set of strides; zeros_like keeps a dense tensor's strides but
    # not those of a view with gaps (the layer's k and v are views of one B x N x 3 x H x d product): clone() does
    k, v = (t if t.stride() == g.stride() else t.clone() for t, g in ((k, dk), (v, dv)))
    d_omega = torch.empty(omega.shape, dtype=torch.float32, device=omega.device)
    if chunks:
        beta_backward_program[(chunks, B * H)](d_beta, k, v, omega, beta, lse, *_pointers(lengths, sizes, k),
                                        dk, dv, d_omega, *_strides(k), *_strides(v), H, N, chunks, d, size, scale,
                                        HAS_LENGTHS=lengths is not None, HAS_SIZES=sizes is not None,
                                        BLOCK_S=BLOCK_S, BLOCK_D=_pow2(d))
    return dk, dv, d_omega.to(omega.dtype)


@chunk_beta_backward_op.register_fake
def _(d_beta, k, v, omega, beta, lse, lengths, sizes, size, scale):
    return torch.empty_like(k), torch.empty_like(v), torch.empty_like(omega)


def _beta_setup(ctx, inputs, output):
    k, v, omega, lengths, sizes, size, scale = inputs
    ctx.save_for_backward(k, v, omega, lengths, sizes, *output)
    ctx.size, ctx.scale = size, scale


def _beta_grad(ctx, d_beta, d_lse):
    """lse is not differentiable (its gradient is ignored): it is for the backward only."""
    k, v, omega, lengths, sizes, beta, lse = ctx.saved_tensors
    dk, dv, d_omega = chunk_beta_backward_op(d_beta, k, v, omega, beta, lse, lengths, sizes, ctx.size, ctx.scale)
    return dk, dv, d_omega, None, None, None, None


chunk_beta_op.register_autograd(_beta_grad, setup_context=_beta_setup)


def chunk_summaries(module, q, k, v, *, chunks, size=0, sizes=None, lengths=None):
    """ChunkSummaries' (k~, beta) with the means and beta in Triton and sigma in torch: chunk c of row b is positions
    [c s_b, min((c + 1) s_b, L_b)), s_b = sizes[b] (or size), L_b = lengths[b] (or N); q, k, v: B x H x N x d."""
    lengths, sizes = (None if t is None else t.to(device=q.device, dtype=torch.int32) for t in (lengths, sizes))
    q_mean, k_mean = chunk_means_op(q, k, lengths, sizes, size, chunks)
    k_summary, omega = module._proposal(q_mean, k_mean)
    beta, _ = chunk_beta_op(k, v, omega, lengths, sizes, size, module.scale)
    return k_summary.to(k.dtype), beta
