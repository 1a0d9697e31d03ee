"""Chunk summaries of EVA: the key summary k~_c and the value summary beta_c of each chunk.

For a chunk P_c (the paper's Eq. 11-13; docs/design.md, "What EVA computes"):
    k~_c = sigma_k(mean of k over P_c),   mu_c = sigma_q(mean of q over P_c) + k~_c   (proposal_mean "sum"),
                                          mu_c = (sigma_q(...) + k~_c) / 2           (proposal_mean "average"),
    omega_c = mu_c + eps (training) or mu_c (evaluation),
    beta_c = sum_{m in P_c} softmax_m((omega_c . k_m - |k_m|^2 / 2) / sqrt(d)) v_m,
an importance-sampling estimate, with one sample omega_c, of the chunk's share of the softmax output.
"""

import importlib.util
import math
from typing import NamedTuple

import torch
from torch import nn

from .layout import tensor_cache

PROPOSALS = ("layernorm", "linear", "identity")
# mu_c = sigma_q(q mean) + k~_c (the paper's Eq. 11-13, and the authors' causal code) or half of it (the authors'
# bidirectional code); docs/design.md, "Where this differs from the paper and the authors' code"
PROPOSAL_MEANS = ("sum", "average")


def upcast(x):
    """float16 / bfloat16 to float32 for softmax-type reductions; float32 and float64 as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def proposal_projection(kind, dim):
    """sigma: Linear + LayerNorm (the paper's choice), Linear only, or the identity."""
    if kind == "layernorm":
        return nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
    if kind == "linear":
        return nn.Linear(dim, dim)
    if kind == "identity":
        return nn.Identity()
    raise ValueError(f"proposal must be one of {', '.join(PROPOSALS)}; got {kind!r}")


def log_weights(omega, k, scale):
    """(omega . k_m - |k_m|^2 / 2) scale in float32 at least, as products that autograd saves as they are (k is a
    view of the projection's output, omega one vector a chunk): nothing of size N x d is kept for the backward."""
    k = upcast(k)
    return torch.sub((k * upcast(omega)).sum(-1), k.square().sum(-1), alpha=0.5).mul_(scale)


class ChunkValues(torch.autograd.Function):
    """beta_c = sum_m softmax_m((omega_c . k_m - |k_m|^2 / 2) scale) v_m over the s positions of each chunk (omega
    B x H x C x d; k, v B x H x C x s x d), with its backward written out: a third of the operations autograd
    dispatches for it, on a layer whose time on a GPU is their count. It keeps k, v (views of the projection),
    omega and the weights (B x H x C x s), as autograd did."""

    @staticmethod
    def forward(ctx, omega, k, v, scale):
        p = torch.softmax(log_weights(omega.unsqueeze(3), k, scale), dim=-1)  # B x H x C x s, float32 at least
        ctx.save_for_backward(omega, k, v, p)
        ctx.scale = scale
        return (p.to(v.dtype).unsqueeze(-1) * v).sum(3)

    @staticmethod
    def backward(ctx, d_beta):
        omega, k, v, p = ctx.saved_tensors
        d_beta = d_beta.unsqueeze(3)  # B x H x C x 1 x d
        dv = p.to(v.dtype).unsqueeze(-1) * d_beta
        d_logits = torch._softmax_backward_data(upcast((d_beta * v).sum(-1)), p, -1, p.dtype).mul_(ctx.scale)
        kf, d_logits = upcast(k), d_logits.unsqueeze(-1)
        # d logit_m / d omega = k_m, d logit_m / d k_m = omega - k_m (times scale, in d_logits)
        d_omega = (d_logits * kf).sum(3)
        dk = (upcast(omega).unsqueeze(3) - kf).mul_(d_logits)  # in place: one N x d tensor less beside dv
        return d_omega.to(omega.dtype), dk.to(k.dtype), dv, None


TRITON = importlib.util.find_spec("triton") is not None


def _use_triton(q):
    return q.is_cuda and TRITON


def fused_summaries(module, q, k, v, chunk_size=0, segments=None):
    """What uniform / segmented return, from the Triton programs for CUDA tensors where Triton is installed (four
    launches instead of a hundred operations); None elsewhere: the PyTorch path, the CPU kernels'. `segments` must
    be the layer's: chunks of one size a row from position 0, pads after the row's length."""
    if not _use_triton(q):
        return None
    from .kernels.triton import summaries

    if segments is None:
        return summaries.chunk_summaries(module, q, k, v, chunks=q.size(2) // chunk_size, size=chunk_size)
    ids, count = segments.ids, segments.count
    lengths, sizes = (ids < count).sum(1), (ids == 0).sum(1)
    k_summary, beta = summaries.chunk_summaries(module, q, k, v, chunks=count, sizes=sizes, lengths=lengths)
    return k_summary, beta, segments.ok


class ChunkSummaries(nn.Module):
    """Computes (k~, beta) for all chunks at once; sigma_q and sigma_k are shared by the heads."""

    def __init__(self, head_dim, proposal="layernorm", omega_noise=True, proposal_mean="sum"):
        super().__init__()
        if proposal_mean not in PROPOSAL_MEANS:
            raise ValueError(f"proposal_mean must be one of {', '.join(PROPOSAL_MEANS)}; got {proposal_mean!r}")
        self.omega_noise = omega_noise  # False: omega = mu in training too (a diagnostic; the paper samples)
        self.proposal_mean = proposal_mean  # "average": mu halved, before the noise (the authors' bidirectional code)
        self.sigma_q = proposal_projection(proposal, head_dim)
        self.sigma_k = proposal_projection(proposal, head_dim)
        self.scale = head_dim**-0.5

    def _proposal(self, q_mean, k_mean):
        """(k~, omega) from the chunk means: every path (PyTorch, Triton, decoding) forms mu here."""
        k_summary = self.sigma_k(k_mean)
        omega = self.sigma_q(q_mean) + k_summary
        if self.proposal_mean == "average":
            omega = 0.5 * omega
        if self.training and self.omega_noise:
            omega = omega + torch.randn_like(omega)
        return k_summary, omega

    def uniform(self, q, k, v, chunk_size):
        """q, k, v: B x H x N x d (any strides), N a multiple of chunk_size, every position real.

        Returns k~ and beta, each B x H x (N / chunk_size) x d.
        """
        fused = fused_summaries(self, q, k, v, chunk_size=chunk_size)
        if fused is not None:
            return fused
        qc, kc, vc = (t.unflatten(2, (-1, chunk_size)) for t in (q, k, v))  # B x H x C x s x d
        k_summary, omega = self._proposal(qc.mean(3), kc.mean(3))
        beta = ChunkValues.apply(omega, kc, vc, self.scale)
        return k_summary.to(k.dtype), beta.to(v.dtype)  # (CUDA autocast runs LayerNorm and sum in float32)

    def segmented(self, q, k, v, segments):
        """Chunks of any layout, given as `Segments` (segments(): each position's chunk, the pads in one more).

        Returns k~ and beta (B x H x num_chunks x d) and which chunks hold a real token (B x num_chunks).
        """
        fused = fused_summaries(self, q, k, v, segments=segments)
        if fused is not None:
            return fused
        chunk_ids, num_chunks = segments.ids, segments.count
        B, H, N, d = q.shape
        index = chunk_ids[:, None, :, None].expand(B, H, N, d)

        def segment_sum(x):  # B x H x N x e -> B x H x num_chunks x e
            out = x.new_zeros(B, H, num_chunks + 1, x.size(-1))
            return out.scatter_add_(2, index[..., : x.size(-1)], x)[:, :, :num_chunks]

        k_summary, omega = self._proposal(segment_sum(q) / segments.sizes, segment_sum(k) / segments.sizes)

        # segment softmax over the positions of each chunk, pads excluded
        omega_at = torch.cat([omega, omega.new_zeros(B, H, 1, d)], dim=2).gather(2, index)
        logits = log_weights(omega_at, k, self.scale)  # pads fall in the extra chunk, dropped below
        ids = chunk_ids[:, None, :].expand(B, H, N)
        maxima = logits.new_zeros(B, H, num_chunks + 1).scatter_reduce_(
            2, ids, logits.detach(), reduce="amax", include_self=False
        )
        weights = torch.exp(logits - maxima.gather(2, ids)).masked_fill(segments.is_pad, 0).unsqueeze(-1)
        beta = segment_sum(weights * upcast(v)) / segment_sum(weights).clamp_min(1e-30)
        return k_summary.to(k.dtype), beta.to(v.dtype), segments.ok


class Segments(NamedTuple):
    """A layout of chunks for ChunkSummaries.segmented: ids (B x N, each position's chunk, `count` for a pad),
    count, is_pad (B x 1 x N), sizes (B x 1 x count x 1, each chunk's real tokens, at least 1), ok (B x count,
    the chunks that hold a real token)."""

    ids: torch.Tensor
    count: int
    is_pad: torch.Tensor
    sizes: torch.Tensor
    ok: torch.Tensor


def segments(chunk_ids, count):
    """The Segments of chunk ids (B x N, `count` at the pads)."""
    real = chunk_ids < count
    sizes = torch.zeros(chunk_ids.size(0), count + 1, dtype=torch.int32, device=chunk_ids.device)
    sizes = sizes.scatter_add_(1, chunk_ids, real.to(torch.int32))[:, :count]
    return Segments(chunk_ids, count, ~real[:, None], sizes.clamp_min(1)[:, None, :, None], sizes > 0)


@tensor_cache
def chunk_segments(lengths, N, num_chunks, chunk_size):
    """Chunks over each row's own L = lengths[b] real tokens (the first L of N positions): C = num_chunks chunks
    of ceil(L / C), or chunks of chunk_size; as Segments. More chunks than positions (C > N) are chunks of one
    token, N of them: the others would hold no token, so they are not laid out (a C of thousands on short sentences
    costs what C = N does)."""
    if chunk_size:
        sizes, count = chunk_size, math.ceil(N / chunk_size)
    else:
        sizes = (lengths[:, None] + num_chunks - 1).div(num_chunks, rounding_mode="floor").clamp_min(1)
        count = min(num_chunks, N)
    positions = torch.arange(N, device=lengths.device)[None, :]
    chunk_ids = (positions // sizes).masked_fill(positions >= lengths[:, None], count)
    return segments(chunk_ids, count)
