"""The feature maps phi of the linear-attention family, one map per head, shared by queries and keys.

Each map's forward(q, k, fixed) gives `Features`: phi(q), and the keys' psi with an optional log-scale s
(forms.py: phi_n(k_m) = psi_m exp(s_m - c_n), with a shift c_n that cancels). The random maps draw fresh iid
Gaussian rows every training forward from torch's global generator, and use a fixed orthogonal draw, a buffer
saved with the model, at evaluation (`fixed=True`), as the authors' code does (efficient_attention's
KernelizedAttention, sample scheme "default").
"""

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Features(NamedTuple):
    q: Tensor  # phi(q): B x H x N x m
    k: Tensor  # psi(k): B x H x N x m
    k_log_scale: Optional[Tensor] = None  # s: B x H x N (None: 0)


def gaussian_rows(heads, rows, dim, orthogonal=False, device=None, dtype=None):
    """heads x rows x dim Gaussian rows w ~ N(0, I): iid, or orthogonal within blocks of `dim` rows with chi(dim)
    lengths (Choromanski et al. 2021, section 2.4: same marginals, lower variance), from the global generator."""
    if not orthogonal:
        return torch.randn(heads, rows, dim, device=device, dtype=dtype)
    if torch.empty(0, device=device).is_meta:  # shapes only (QR's first meta call costs seconds)
        return torch.empty(heads, rows, dim, device=device, dtype=dtype)
    blocks = math.ceil(rows / dim)
    q, r = torch.linalg.qr(torch.randn(heads, blocks, dim, dim, device=device, dtype=dtype))
    q = q * torch.diagonal(r, dim1=-2, dim2=-1).sign()[..., None, :]  # Haar-distributed
    directions = q.transpose(-1, -2).reshape(heads, blocks * dim, dim)[:, :rows]
    lengths = torch.randn(heads, rows, dim, device=device, dtype=dtype).norm(dim=-1, keepdim=True)
    return directions * lengths


def positive_logits(x, w):
    """FAVOR+'s exponents w_i . x~ - |x~|^2 / 2 with x~ = x d^-1/4 (B x H x N x m), so that
    E_w[exp(w.q~ - |q~|^2/2) exp(w.k~ - |k~|^2/2)] = exp(q.k / sqrt(d)) (Choromanski et al. 2021, Lemma 1)."""
    x = x * x.size(-1) ** -0.25
    return x @ w.transpose(-1, -2) - 0.5 * (x * x).sum(-1, keepdim=True)


class RandomFeatureMap(nn.Module):
    """Random rows w (heads x rows x dim): fresh iid each training forward, a fixed orthogonal draw (buffer) otherwise."""

    def __init__(self, heads, rows, dim):
        super().__init__()
        self.register_buffer("eval_rows", gaussian_rows(heads, rows, dim, orthogonal=True))

    def rows(self, fixed, like):
        if fixed:
            return self.eval_rows.to(like.dtype)
        return gaussian_rows(*self.eval_rows.shape, device=like.device, dtype=like.dtype)

    def extra_repr(self):
        heads, rows, dim = self.eval_rows.shape
        return f"heads={heads}, num_features={rows}, head_dim={dim}"


class FavorPlus(RandomFeatureMap):
    """Performer's maps (Choromanski et al. 2021).

    positive: FAVOR+ as defined, phi(x) = m^-1/2 exp(w_i.x~ - |x~|^2/2) with x~ = x d^-1/4, an unbiased estimate
    of exp(q.k/sqrt(d)) (Lemma 1). For range only, a query's exponents are shifted by their largest value and
    the keys' by the largest over the keys each query sees (the layer, forms.py): one factor per query on
    numerator and denominator alike, so the output is FAVOR+'s exactly. Nothing is added to the features.
    (Performer's code adds 1e-6 to the features after its shift, performer-pytorch and the EVA authors' code
    1e-4, and all three shift by the largest w.x only, keeping exp(-|x~|^2/2). The shifted features' scale is
    set by the shift, not the data, and at d = 64 and m = 256 that constant is not small beside them: it would
    change the output, and is left out here.)

    relu: phi(x) = m^-1/2 ReLU(W x~) + eps, eps = 1e-3, which without eps estimates the order-1 arc-cosine
    kernel (|q~||k~|/2pi)(sin t + (pi - t) cos t). eps is part of this map as its authors have it: the EVA
    authors' code, whose masked LM used this map because the positive one did not converge (generalized_projection
    in HKUNLP/efficient-attention, efficient_attention/kernelized_attention.py: this form, eps = 0.001), and
    Performer's own (numerical_stabilizer = 0.001 of relu_kernel_transformation, google-research
    performer/fast_attention/tensorflow/fast_attention.py, there on ReLU(m^-1/2 W x) without the d^-1/4)."""

    RELU_EPS = 1e-3

    def __init__(self, heads, num_features, head_dim, kernel="positive"):
        super().__init__(heads, num_features, head_dim)
        self.kernel = kernel
        self.eps = self.RELU_EPS if kernel == "relu" else 0.0  # the positive map adds nothing

    def extra_repr(self):
        return f"{super().extra_repr()}, kernel={self.kernel}"

    def forward(self, q, k, fixed=False):
        w = self.rows(fixed, q)
        ratio = w.size(-2) ** -0.5
        if self.kernel == "relu":
            scale = q.size(-1) ** -0.25
            return Features(ratio * F.relu(q * scale @ w.transpose(-1, -2)) + self.eps,
                            ratio * F.relu(k * scale @ w.transpose(-1, -2)) + self.eps)
        aq, ak = positive_logits(q, w), positive_logits(k, w)
        s = ak.amax(-1)  # the keys' exponents, carried as a log-scale for the layer's shift
        return Features(ratio * torch.exp(aq - aq.amax(-1, keepdim=True)), ratio * torch.exp(ak - s[..., None]), s)


class RandomFourier(RandomFeatureMap):
    """RFA (Peng et al. 2021, Eq. 3): phi(x) = D^-1/2 [sin(w_i.x), cos(w_i.x)] on x / |x|, w_i ~ N(0, sigma^-2 I),
    so that E phi(x).phi(y) = exp(-|x - y|^2 / 2 sigma^2), proportional to exp(q.k / sigma^2) for unit q, k.
    sigma is learned per head as exp(log_sigma) (positive), initialised to 1."""

    def __init__(self, heads, num_features, head_dim):
        super().__init__(heads, num_features, head_dim)
        self.log_sigma = nn.Parameter(torch.zeros(heads))

    def features(self, x, w):
        wx = F.normalize(x, dim=-1) @ (w / self.log_sigma.exp().to(w.dtype)[:, None, None]).transpose(-1, -2)
        return torch.cat([wx.sin(), wx.cos()], -1) * w.size(-2) ** -0.5

    def forward(self, q, k, fixed=False):
        w = self.rows(fixed, q)
        return Features(self.features(q, w), self.features(k, w))


class EluPlusOne(nn.Module):
    """Katharopoulos et al. 2020, Eq. 7: phi(x) = elu(x) + 1, feature dimension d (no 1/sqrt(d) scaling)."""

    def forward(self, q, k, fixed=False):
        return Features(F.elu(q) + 1, F.elu(k) + 1)


class TrainedReLU(nn.Module):
    """T2R (Kasai et al. 2021, Eq. 4): phi(x) = ReLU(W x + b), W (k x d) and b (k) trained, one map per head."""

    def __init__(self, heads, num_features, head_dim):
        super().__init__()
        bound = head_dim**-0.5  # as nn.Linear's initialisation
        self.weight = nn.Parameter(torch.empty(heads, num_features, head_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(heads, num_features).uniform_(-bound, bound))

    def extra_repr(self):
        heads, num_features, head_dim = self.weight.shape
        return f"heads={heads}, num_features={num_features}, head_dim={head_dim}"

    def features(self, x):
        return F.relu(x @ self.weight.to(x.dtype).transpose(-1, -2) + self.bias.to(x.dtype)[:, None, :])

    def forward(self, q, k, fixed=False):
        return Features(self.features(q), self.features(k))
