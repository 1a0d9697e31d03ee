"""LARA, linear randomized attention (Zheng, Wang, Kong, ICML 2022), bidirectional only.

Softmax attention is an expectation under a query-specific distribution p_n(omega) (the paper's randomized
attention); LARA estimates it by self-normalised multiple importance sampling with C proposals shared by all
queries, one sample each (the paper's Sec. 4). Per head, with s(a, b) = a.b / sqrt(d):

    segments     C contiguous segments of each row's L real tokens, of ceil(L / C) tokens (EVA's chunk layout);
    q~_c, k~_c   means over segment c of sigma(q_m), sigma(k_m) (sigma: the per-layer proposal projection);
    proposals    q_c(omega) = N(omega; mu_c, I), mu_c = q~_c + k~_c; omega_c ~ q_c in training, mu_c in evaluation;
    xi(x, w)     exp((w.x - |x|^2 / 2) / sqrt(d))  (the 1/sqrt(d) on both exponents as the authors' code);
    beta_c       sum_m xi(k_m, omega_c) v_m / sum_m xi(k_m, omega_c)   (over real keys; no query in it);
    w_nc         alpha_nc xi(q_n, omega_c) sum_m xi(k_m, omega_c) / xi(mu_c, omega_c);
    y_n          sum_c w_nc beta_c / sum_c w_nc.

xi(mu_c, omega) stands for q_c(omega) / N(omega; 0, I) (exact without the 1/sqrt(d) factor). The weights alpha:
  mis-bh   the balance heuristic, alpha_nc = q_c(omega_c) / sum_c' q_c'(omega_c);
  mis-opt  the paper's approximation of the optimal weights: the balance heuristic + lambda (r_nc - mean_c' r_nc'),
           r_nc = exp(s(q~_c, q_n)) / sum_n' exp(s(q~_c, q_n')), normalised over the queries n' of the row: the
           paper's definition of r_nc sums over n in its denominator, and the authors' code does the same. Either
           axis keeps sum_c alpha_nc = 1 (the correction is centred over c); over n, the correction for one
           proposal is spread over the queries that resemble its segment. alpha can turn negative: it is
           clamped at 1e-8, as the authors'.
Everything runs in log space (log-sum-exp); segments with no real token (C > L) are no proposal, and a batch of
N positions lays out C' = min(C, N) segments only (the others would be empty): the cost is the documented 5 C' D.
Attention dropout applies to the normalised weights w_nc / sum_c' w_nc'. Tensors are B x H x C x N (proposal, query).
"""

import math

import torch

from .base import ProjectedAttention
from .chunks import PROPOSALS, chunk_segments, proposal_projection, upcast
from .mechanism import BIDIRECTIONAL, Mechanism, Memory, Option

MIS_TYPES = ("mis-opt", "mis-bh")
ALPHA_FLOOR = 1e-8


def log_xi(x, omega, scale):
    """log xi(x_m, omega_c) for every c and m: omega B x H x C x d, x B x H x M x d -> B x H x C x M."""
    return (omega @ x.transpose(-1, -2) - 0.5 * x.square().sum(-1).unsqueeze(-2)) * scale


class LARAAttention(ProjectedAttention):
    """LARA over each row's real tokens; sigma_q, sigma_k are shared by the heads (the authors' adaptive-1d).

    sigma is applied to every token and then averaged over the segment, as the authors' adaptive-1d (EVA applies
    it to the segment mean instead): 2 d^2 multiply-adds a token and head for q and k.
    """

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, num_landmarks=256, mis="mis-opt",
                 alpha_coeff=1.0, proposal="layernorm"):
        if causal:
            raise ValueError("lara attention is bidirectional only (its proposals are built from the whole sequence)")
        if not isinstance(num_landmarks, int) or isinstance(num_landmarks, bool) or num_landmarks < 1:
            raise ValueError(f"num_landmarks must be a positive integer, got {num_landmarks!r}")
        if mis not in MIS_TYPES:
            raise ValueError(f"mis must be one of {', '.join(MIS_TYPES)}; got {mis!r}")
        if not isinstance(alpha_coeff, (int, float)) or isinstance(alpha_coeff, bool) or not math.isfinite(alpha_coeff):
            raise ValueError(f"alpha_coeff must be a finite number, got {alpha_coeff!r}")
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal must be one of {', '.join(PROPOSALS)}; got {proposal!r}")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.num_landmarks, self.mis, self.alpha_coeff = num_landmarks, mis, float(alpha_coeff)
        self.sigma_q = proposal_projection(proposal, self.head_dim)
        self.sigma_k = proposal_projection(proposal, self.head_dim)

    def extra_repr(self):
        return f"num_landmarks={self.num_landmarks}, mis={self.mis}, alpha_coeff={self.alpha_coeff}"

    def attend(self, x, q, k, v, lengths):
        B, H, N, d = q.shape
        C, scale = min(self.num_landmarks, N), d**-0.5  # beyond N every segment is empty: no proposal, no cost
        if lengths is None:
            lengths = torch.full((B,), N, device=q.device)
        # a row of pads only is laid out as one real token, its output zeroed below: no empty softmax anywhere
        seg = chunk_segments(lengths.clamp_min(1), N, C, 0)
        index = seg.ids[:, None, :, None].expand(B, H, N, d)

        def segment_mean(t):  # B x H x N x d -> B x H x C x d; the pads fall in an extra segment, dropped
            return t.new_zeros(B, H, C + 1, d).scatter_add_(2, index, t)[:, :, :C] / seg.sizes

        q_tilde = segment_mean(upcast(self.sigma_q(q)))
        mu = q_tilde + segment_mean(upcast(self.sigma_k(k)))
        omega = mu
        if self.training:  # one draw a head and proposal, shared by the rows: a row's output is the same in any batch
            # (all C proposals drawn, so that the draws of the first C' do not depend on the batch's length)
            noise = torch.randn(H, self.num_landmarks, d, dtype=mu.dtype, device=mu.device)
            omega = mu + noise[:, :C]
        qf, kf, vf = upcast(q), upcast(k), upcast(v)
        is_pad = seg.is_pad[:, None]  # B x 1 x 1 x N
        proposal_ok = seg.ok[:, None, :, None]  # B x 1 x C x 1

        log_k = log_xi(kf, omega, scale).masked_fill(is_pad, -math.inf)  # B x H x C x N
        log_z = torch.logsumexp(log_k, -1, keepdim=True)  # log sum_m xi(k_m, omega_c)
        beta = torch.softmax(log_k, -1) @ vf  # B x H x C x d
        log_mu = log_xi(mu, omega, scale)  # [c, c'] = log xi(mu_c', omega_c) = log q_c'(omega_c) + const
        log_mixture = torch.logsumexp(log_mu.masked_fill(~seg.ok[:, None, None, :], -math.inf), -1, keepdim=True)
        if self.mis == "mis-bh":  # alpha / q_c(omega_c) = 1 / sum_c' q_c'(omega_c)
            log_alpha_over_proposal = -log_mixture
        else:
            log_own = log_mu.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # log xi(mu_c, omega_c), B x H x C x 1
            r = torch.softmax((q_tilde @ qf.transpose(-1, -2) * scale).masked_fill(is_pad, -math.inf), -1)
            r_mean = (r * proposal_ok).sum(2, keepdim=True) / proposal_ok.sum(2, keepdim=True)
            alpha = torch.exp(log_own - log_mixture) + self.alpha_coeff * (r - r_mean)
            log_alpha_over_proposal = alpha.clamp_min(ALPHA_FLOOR).log() - log_own
        log_w = log_alpha_over_proposal + log_xi(qf, omega, scale) + log_z  # B x H x C x N
        p = torch.softmax(log_w.masked_fill(~proposal_ok, -math.inf), dim=2)  # over the proposals
        y = self.dropout(p).transpose(-1, -2) @ beta  # B x H x N x d
        return (y * (lengths > 0)[:, None, None, None]).to(v.dtype)


def reference(q, k, v, sigma_q, sigma_k, num_landmarks, mis="mis-opt", alpha_coeff=1.0, noise=None, real=None):
    """Per-query float64 LARA from its definition (no log space): q, k, v B x H x N x d with each row's real
    tokens first; sigma_q, sigma_k the proposal projections; noise H x C x d, omega_c = mu_c + noise_c in every
    row (None: omega_c = mu_c); real B x N, True at the real tokens."""
    q, k, v = (t.double() for t in (q, k, v))
    B, H, N, d = q.shape
    out = torch.zeros_like(q)

    def xi(x, w):
        return torch.exp((w @ x - x @ x / 2) / math.sqrt(d))

    for b in range(B):
        L = N if real is None else int(real[b].sum())
        if L == 0:
            continue
        size = math.ceil(L / num_landmarks)
        segments = {c: list(range(c * size, min((c + 1) * size, L))) for c in range(num_landmarks)}
        segments = {c: s for c, s in segments.items() if s}
        for h in range(H):
            sq, sk = sigma_q(q[b, h, :L]).double(), sigma_k(k[b, h, :L]).double()
            q_tilde = {c: sq[s].mean(0) for c, s in segments.items()}
            mu = {c: q_tilde[c] + sk[s].mean(0) for c, s in segments.items()}
            omega = {c: mu[c] + (0 if noise is None else noise[h, c].double()) for c in segments}
            z = {c: sum(xi(k[b, h, m], omega[c]) for m in range(L)) for c in segments}
            beta = {c: sum(xi(k[b, h, m], omega[c]) * v[b, h, m] for m in range(L)) / z[c] for c in segments}
            balance = {c: xi(mu[c], omega[c]) / sum(xi(mu[e], omega[c]) for e in segments) for c in segments}
            for n in range(L):
                r = {c: torch.exp(q_tilde[c] @ q[b, h, n] / math.sqrt(d))
                     / sum(torch.exp(q_tilde[c] @ q[b, h, m] / math.sqrt(d)) for m in range(L)) for c in segments}
                r_mean = sum(r.values()) / len(r)
                numerator, denominator = 0, 0
                for c in segments:
                    alpha = balance[c]
                    if mis == "mis-opt":
                        alpha = max(alpha + alpha_coeff * (r[c] - r_mean), torch.tensor(ALPHA_FLOOR, dtype=q.dtype))
                    w = alpha * xi(q[b, h, n], omega[c]) * z[c] / xi(mu[c], omega[c])
                    numerator, denominator = numerator + w * beta[c], denominator + w
                out[b, h, n] = numerator / denominator
    return out


def lara_cost(N, embed_dim, num_heads, causal=False, num_landmarks=256, **_):
    """5 C' D + 2 d D with C' = min(C, N). Per token, for each of the C' proposals and each head, d multiply-adds
    each for xi(k, omega_c), for beta_c's numerator, for xi(q, omega_c), for r's logit q.q~_c and for the output's
    sum over c: 5 C' D; sigma on q and k, two d x d products a head: 2 d D. Per sequence, xi(mu_c', omega_c) for
    all pairs (C^2 d a head) is amortised over N tokens and left out."""
    head_dim = embed_dim // num_heads
    return 5 * min(num_landmarks, N) * embed_dim + 2 * head_dim * embed_dim


MECHANISMS = (
    Mechanism(
        "lara", ".lara:LARAAttention", (BIDIRECTIONAL,),
        (Option("num_landmarks", int, 256, "number C of proposals (landmarks), one per contiguous segment of the "
                "sequence (the paper: 256 for masked LM, 16/32/64 for WMT14)"),
         Option("mis", str, "mis-opt", "multiple-importance-sampling weights: mis-opt (the paper's, balance "
                "heuristic plus a query-dependent correction) or mis-bh (balance heuristic only)", MIS_TYPES),
         Option("alpha_coeff", float, 1.0, "coefficient lambda of mis-opt's query-dependent correction"),
         Option("proposal", str, "layernorm", "projection sigma of q and k before the segment means: Linear + "
                "LayerNorm (the paper's), Linear, or the identity (no parameters)", PROPOSALS)),
        lara_cost,
        "LARA: self-normalised multiple importance sampling of softmax attention with C segment proposals",
        title="LARA", knob="num_landmarks",
        # the noise of every proposal, the weights of C' = min(C, N)
        memory=Memory(("num_landmarks",), lambda B, N, H, d, o: H * o["num_landmarks"] * d
                      + B * H * min(N, o["num_landmarks"]) * N, 1)),
)
