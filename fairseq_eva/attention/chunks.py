"""Chunk summaries of EVA: the key summary k~_c and the value summary beta_c of each chunk.

For a chunk P_c (the paper's Eq. 11-13; docs/design.md, "What EVA computes"):
    k~_c = sigma_k(mean of k over P_c),   mu_c = sigma_q(mean of q over P_c) + k~_c,
    omega_c = mu_c + eps (training) or mu_c (evaluation),
    beta_c = sum_{m in P_c} softmax_m((omega_c . k_m - |k_m|^2 / 2) / sqrt(d)) v_m,
an importance-sampling estimate, with one sample omega_c, of the chunk's share of the softmax output.
"""

import importlib.util

import torch
from torch import nn

PROPOSALS = ("layernorm", "linear", "identity")


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


TRITON = importlib.util.find_spec("triton") is not None


def _use_triton(q):
    return q.is_cuda and TRITON


def fused_summaries(module, q, k, v, chunk_size=0, chunk_ids=None, num_chunks=0):
    """What uniform / segmented return, from the Triton programs for CUDA tensors where Triton is installed (four
    launches instead of a hundred operations); None elsewhere: the PyTorch path, the CPU kernels'. chunk_ids must
    be the layer's: chunks of one size a row from position 0, pads after the row's length."""
    if not _use_triton(q):
        return None
    from .kernels.triton import summaries

    if chunk_ids is None:
        return summaries.chunk_summaries(module, q, k, v, chunks=q.size(2) // chunk_size, size=chunk_size)
    lengths, sizes = (chunk_ids < num_chunks).sum(1), (chunk_ids == 0).sum(1)
    k_summary, beta = summaries.chunk_summaries(module, q, k, v, chunks=num_chunks, sizes=sizes, lengths=lengths)
    chunk_ok = torch.arange(num_chunks, device=q.device) * sizes[:, None] < lengths[:, None]
    return k_summary, beta, chunk_ok


class ChunkSummaries(nn.Module):
    """Computes (k~, beta) for all chunks at once; sigma_q and sigma_k are shared by the heads."""

    def __init__(self, head_dim, proposal="layernorm", omega_noise=True):
        super().__init__()
        self.omega_noise = omega_noise  # False: omega = mu in training too (a diagnostic; the paper samples)
        self.sigma_q = proposal_projection(proposal, head_dim)
        self.sigma_k = proposal_projection(proposal, head_dim)
        self.scale = head_dim**-0.5

    def _proposal(self, q_mean, k_mean):
        k_summary = self.sigma_k(k_mean)
        omega = self.sigma_q(q_mean) + k_summary
        if self.training and self.omega_noise:
            omega = omega + torch.randn_like(omega)
        return k_summary, omega

    def _log_weights(self, omega, k):
        # (omega . k_m - |k_m|^2 / 2) / sqrt(d), as products that autograd saves as they are (k is a view of the
        # projection's output, omega one vector a chunk): nothing of size N x d is kept for the backward
        k = upcast(k)
        return ((k * upcast(omega)).sum(-1) - 0.5 * k.square().sum(-1)) * self.scale

    def uniform(self, q, k, v, chunk_size):
        """q, k, v: B x H x N x d (any strides), N a multiple of chunk_size, every position real.

        Returns k~ and beta, each B x H x (N / chunk_size) x d.
        """
        fused = fused_summaries(self, q, k, v, chunk_size=chunk_size)
        if fused is not None:
            return fused
        qc, kc, vc = (t.unflatten(2, (-1, chunk_size)) for t in (q, k, v))  # B x H x C x s x d
        k_summary, omega = self._proposal(qc.mean(3), kc.mean(3))
        weights = torch.softmax(self._log_weights(omega.unsqueeze(3), kc), dim=-1).to(v.dtype)
        beta = (weights.unsqueeze(-1) * vc).sum(3)
        return k_summary.to(k.dtype), beta.to(v.dtype)  # (CUDA autocast runs LayerNorm and sum in float32)

    def segmented(self, q, k, v, chunk_ids, num_chunks):
        """Chunks of any layout: chunk_ids (B x N) gives each position's chunk, num_chunks for pads.

        Returns k~ and beta (B x H x num_chunks x d) and which chunks hold a real token (B x num_chunks).
        """
        fused = fused_summaries(self, q, k, v, chunk_ids=chunk_ids, num_chunks=num_chunks)
        if fused is not None:
            return fused
        B, H, N, d = q.shape
        index = chunk_ids[:, None, :, None].expand(B, H, N, d)

        def segment_sum(x):  # B x H x N x e -> B x H x num_chunks x e
            out = x.new_zeros(B, H, num_chunks + 1, x.size(-1))
            return out.scatter_add_(2, index[..., : x.size(-1)], x)[:, :, :num_chunks]

        real = chunk_ids < num_chunks  # B x N
        counts = real.new_zeros(B, num_chunks + 1, dtype=q.dtype)
        counts = counts.scatter_add_(1, chunk_ids, real.to(q.dtype))[:, :num_chunks]
        denominator = counts.clamp_min(1)[:, None, :, None]
        k_summary, omega = self._proposal(segment_sum(q) / denominator, segment_sum(k) / denominator)

        # segment softmax over the positions of each chunk, pads excluded
        omega_at = torch.cat([omega, omega.new_zeros(B, H, 1, d)], dim=2).gather(2, index)
        logits = self._log_weights(omega_at, k)  # pads fall in the extra chunk, dropped below
        ids = chunk_ids[:, None, :].expand(B, H, N)
        maxima = logits.new_zeros(B, H, num_chunks + 1).scatter_reduce_(
            2, ids, logits.detach(), reduce="amax", include_self=False
        )
        weights = torch.exp(logits - maxima.gather(2, ids)).masked_fill(~real[:, None], 0).unsqueeze(-1)
        beta = segment_sum(weights * upcast(v)) / segment_sum(weights).clamp_min(1e-30)
        return k_summary.to(k.dtype), beta.to(v.dtype), counts > 0
