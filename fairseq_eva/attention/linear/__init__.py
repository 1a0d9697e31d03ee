"""The linear-attention family: Performer (FAVOR+), RFA, ELU and T2R, one core with a pluggable feature map.

    y_n = phi(q_n)^T S / phi(q_n)^T z,    S = sum_m phi(k_m) v_m^T,  z = sum_m phi(k_m)

over the real keys (m <= n when causal). Bidirectional: one pass over the keys; causal: chunks (forms.py, nothing
N x N), and incremental decoding keeps (S, z) as its state, O(1) a token. Padded keys have phi(k) = 0 (zeroing k
or v would not do: phi(0) != 0 for the exp and elu maps).

The features and the linear attention run in float32 when the layer runs in half precision (fp16 or bf16), as
the authors' code does: FAVOR+'s exponential features leave fp16's range (exp(12) > 65504, and small features
underflow). Linear attention never normalises attention
probabilities, so attention dropout does not apply to it (the `dropout` argument is accepted and unused).
"""

import torch
import torch.nn.functional as F
from torch import nn

from ..base import ProjectedAttention, key_mask
from ..mechanism import BIDIRECTIONAL, CAUSAL, Mechanism, Memory, Option
from . import forms
from .feature_maps import EluPlusOne, FavorPlus, RandomFourier, TrainedReLU

KERNELS = ("positive", "relu")


def _check_num_features(num_features):
    if isinstance(num_features, bool) or not isinstance(num_features, int) or num_features < 1:
        raise ValueError(f"num_features must be a positive integer, got {num_features!r}")


class LinearAttention(ProjectedAttention):
    """Normalised linear attention over `self.feature_map`'s features (set by the subclass).

    `chunk_size`: queries per chunk of the causal form; `min_denominator`: a clamp of phi(q)^T z for maps whose
    features can make it <= 0 (0: none, only the dtype's smallest normal number, which binds only where a query
    sees no real key: its output is 0, not 0/0; forms.py)."""

    chunk_size = 64
    min_denominator = 0.0

    def gating(self, x):
        """A gated state's (1 - g_t, log g_t), B x H x N each, or (None, None): the keys' features are scaled by
        1 - g and lambda = log g decays the state (forms.py)."""
        return None, None

    def _features(self, x, q, k, v, fixed):
        """Features and values at float32 at least, outside autocast, with the gate's scales."""
        dtype = torch.promote_types(q.dtype, torch.float32)
        q, k, v, x = (t.to(dtype) for t in (q, k, v, x))
        f = self.feature_map(q, k, fixed=fixed)
        weight, lam = self.gating(x)
        if weight is not None:
            f = f._replace(k=f.k * weight[..., None])
        return f, f.k_log_scale, lam, v

    def attend(self, x, q, k, v, lengths):
        real = key_mask(lengths, q.size(2), q.device)
        with torch.autocast(q.device.type, enabled=False):
            f, s, lam, v32 = self._features(x, q, k, v, fixed=not self.training)
            if self.causal:
                y = forms.causal_chunked(f.q, f.k, v32, s, lam, real, self.min_denominator, self.chunk_size)
            else:
                y = forms.bidirectional(f.q, f.k, v32, s, real, self.min_denominator)
        return y.to(q.dtype)

    def step(self, x, q, k, v, cache):
        """One token of incremental decoding, with the fixed (evaluation) features."""
        with torch.autocast(q.device.type, enabled=False):
            f, s, lam, v32 = self._features(x, q, k, v, fixed=True)
            if not cache:
                cache.update(forms.initial_state(f.q, v32))
            y = forms.recurrent_step(cache, f.q, f.k, v32, s, lam, self.min_denominator)
        return y.to(q.dtype)


class PerformerAttention(LinearAttention):
    """Performer, FAVOR+ (Choromanski et al. 2021), `kernel` positive or relu, `num_features` m random features.
    Fresh iid features every training forward, a fixed orthogonal draw (saved with the model) at evaluation. The
    output is FAVOR+'s by its definition: the max-shifts that keep the exponentials in range cancel, and nothing is
    added to the features or clamped in the denominator (the relu map's eps excepted; feature_maps.FavorPlus)."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, kernel="positive", num_features=256):
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
        _check_num_features(num_features)
        self.feature_map = FavorPlus(num_heads, num_features, self.head_dim, kernel)


class RFAAttention(LinearAttention):
    """Random Feature Attention (Peng et al. 2021): trigonometric random features of unit-norm q and k with a learned
    sigma per head, optionally gated (causal only): g_t = sigmoid(w_g . x_t + b_g) per head,
    S_t = g_t S_{t-1} + (1 - g_t) phi(k_t) v_t^T and z likewise (Eq. 7). phi(q)^T z can be <= 0 with
    trigonometric features (sin and cos take either sign): the denominator is clamped at 1e-2, the one map of
    the family that needs a clamp (the EVA authors' linear_attention clamps every map's at 1e-2)."""

    min_denominator = 1e-2

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, num_features=64, gate=False):
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        _check_num_features(num_features)
        if gate and not causal:
            raise ValueError("gate must be false for bidirectional attention (the gated state decays left to right)")
        self.feature_map = RandomFourier(num_heads, num_features, self.head_dim)
        self.gate = nn.Linear(embed_dim, num_heads) if gate else None

    def gating(self, x):
        if self.gate is None:
            return None, None
        logit = F.linear(x, self.gate.weight.to(x.dtype), self.gate.bias.to(x.dtype)).transpose(1, 2)  # B x H x N
        return torch.sigmoid(-logit), F.logsigmoid(logit)  # 1 - g, log g


class ELUAttention(LinearAttention):
    """Linear attention with phi(x) = elu(x) + 1 (Katharopoulos et al. 2020). Its features are positive, so the
    denominator is clamped only against underflow (1e-6)."""

    min_denominator = 1e-6

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0):
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.feature_map = EluPlusOne()


class T2RAttention(LinearAttention):
    """T2R (Kasai et al. 2021): phi(x) = ReLU(W x + b), a trained k x d map per head shared by q and k. Its
    features are >= 0; when all vanish the denominator is 0 and the clamp (1e-6) makes the output 0."""

    min_denominator = 1e-6

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, num_features=32):
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        _check_num_features(num_features)
        self.feature_map = TrainedReLU(num_heads, num_features, self.head_dim)


# ---------------------------------------------------------------------- costs and registry entries


def performer_cost(N, embed_dim, num_heads, causal=False, kernel="positive", num_features=256):
    """4 m D. Per head and token: W q~ and W k~ (m d each), phi(k) v^T into the state (m d) and phi(q)^T S (m d);
    the normaliser z (m per head) is negligible. The same per token when causal (the state is a running sum)."""
    return 4 * num_features * embed_dim


def rfa_cost(N, embed_dim, num_heads, causal=False, num_features=64, gate=False):
    """6 D_rf D (+ D H with the gate). Per head and token: W q and W k (D_rf d each), the state update and phi(q)^T S over 2 D_rf
    features (2 D_rf d each); the gate adds w_g . x, D MACs per head (D H)."""
    return 6 * num_features * embed_dim + (embed_dim * num_heads if gate else 0)


def elu_cost(N, embed_dim, num_heads, causal=False):
    """2 d D. Per head and token: phi(k) v^T (d d) and phi(q)^T S (d d); elu is elementwise."""
    return 2 * (embed_dim // num_heads) * embed_dim


def t2r_cost(N, embed_dim, num_heads, causal=False, num_features=32):
    """4 k D. Per head and token: the feature MLP on q and k (2 k d, i.e. 2 k d H = 2 k D over the heads), the
    state update (k d) and phi(q)^T S (k d)."""
    return 2 * num_features * embed_dim + 2 * num_features * (embed_dim // num_heads) * num_heads


_BOTH = (BIDIRECTIONAL, CAUSAL)

MECHANISMS = (
    Mechanism(
        "performer", ".linear:PerformerAttention", _BOTH,
        (Option("kernel", str, "positive",
                "FAVOR+ feature map: positive (exp features, unbiased for softmax) or relu (ReLU random features; "
                "the EVA paper's masked LM used relu as the positive map did not converge)", KERNELS),
         Option("num_features", int, 256, "number m of random features per head (EVA paper: 256 for the masked LM, "
                "128 for WMT14)")),
        performer_cost,
        "Performer (FAVOR+): linear attention with random features, fresh in training, fixed at evaluation",
        title="Performer", knob="num_features",
        memory=Memory(("num_features",), lambda B, N, H, d, o: 2 * B * H * N * o["num_features"], 4)),  # phi(q), phi(k)
    Mechanism(
        "rfa", ".linear:RFAAttention", _BOTH,
        (Option("num_features", int, 64, "number D_rf of random frequencies per head (2 D_rf features); the EVA "
                "paper does not give it"),
         Option("gate", bool, False, "gated recurrence with a learned per-head forget gate (causal only)")),
        rfa_cost, "RFA: linear attention with random Fourier features and a learned scale, optionally gated",
        title="RFA", knob="num_features",
        memory=Memory(("num_features",), lambda B, N, H, d, o: 4 * B * H * N * o["num_features"], 2)),  # sin, cos
    Mechanism(
        "elu", ".linear:ELUAttention", _BOTH, (), elu_cost, "linear attention with elu(x) + 1 features", title="ELU"),
    Mechanism(
        "t2r", ".linear:T2RAttention", _BOTH,
        (Option("num_features", int, 32, "feature size k of the trained ReLU map per head (32 matches the "
                "parameter count of the EVA paper's T2R row)"),),
        t2r_cost, "T2R: linear attention with a trained ReLU feature map", title="T2R", knob="num_features",
        memory=Memory(("num_features",), lambda B, N, H, d, o: 2 * B * H * N * o["num_features"], 2)),
)
