"""The linear-attention family (performer, rfa, elu, t2r): the layer against its float64 reference with padding;
the quadratic, chunked and recurrent causal forms agree; the estimators' means (Performer's positive and ReLU
maps, RFA's trigonometric map) by z-tests at a fixed seed, each with a false-alarm rate of about 1e-5
(|z| < 4.4); Performer equals FAVOR+ by its definition at the sizes of the paper's models (m = 128, 256 features,
d = 64, N up to 2048; every causal form and incremental decoding) and stays finite in float32 and under bfloat16
autocast with logits up to 30; RFA's gated recurrence equals its parallel decay form and a closed gate returns v;
evaluation is deterministic and survives save/load; the shared checks (tests/mechanism_checks.py) for each map."""

import io
import math

import mechanism_checks as checks
import pytest
import torch

from fairseq_eva.attention import registry
from fairseq_eva.attention.linear import forms
from fairseq_eva.attention.linear.feature_maps import FavorPlus, RandomFourier, positive_logits
from fairseq_eva.attention.linear.reference import reference

pytestmark = pytest.mark.usefixtures("one_thread")

Z_MAX = 4.4  # two-sided P(|z| > 4.4) ~ 1.1e-5 under the null

# (name, options, directions): the variants the brief of each paper needs
VARIANTS = [
    ("performer", {}, (False, True)),
    ("performer", {"kernel": "relu"}, (False, True)),
    ("rfa", {}, (False, True)),
    ("rfa", {"gate": True}, (True,)),
    ("elu", {}, (False, True)),
    ("t2r", {}, (False, True)),
]
IDS = ["performer-positive", "performer-relu", "rfa", "rfa-gate", "elu", "t2r"]
CASES = [(name, options, causal) for name, options, directions in VARIANTS for causal in directions]
CASE_IDS = [f"{i}-{'causal' if c else 'bidirectional'}" for i, (_, _, ds) in zip(IDS, VARIANTS) for c in ds]


def _reference_params(module):
    """The feature map's parameters as the reference takes them (evaluation features)."""
    fmap = module.feature_map
    if module.__class__.__name__ == "PerformerAttention":
        return fmap.kernel, {"w": fmap.eval_rows}
    if module.__class__.__name__ == "RFAAttention":
        return "rfa", {"w": fmap.eval_rows, "sigma": fmap.log_sigma.exp()}
    if module.__class__.__name__ == "T2RAttention":
        return "t2r", {"w": fmap.weight, "b": fmap.bias}
    return "elu", {}


def _module_and_reference(module, x, mask, **reference_options):
    """The layer's output and out_proj(reference) on the same input, B x N x embed."""
    q, k, v = module.project(x)
    kind, params = _reference_params(module)
    gate = None
    if getattr(module, "gate", None) is not None:
        gate = torch.sigmoid(module.gate(x)).transpose(1, 2)
    eps = module.feature_map.eps if kind in ("positive", "relu") else 0.0
    options = dict(eps=eps, min_denominator=module.min_denominator)
    options.update(reference_options)
    y = reference(q, k, v, kind, params, causal=module.causal, real=~mask, gate=gate, **options)
    return module(x, mask), module.out_proj(y.transpose(1, 2).reshape(x.shape))


def _padded_input(N=9, seed=0):
    """Two rows: one left-padded by 2, one right-padded by 3 (pads hold large values)."""
    torch.manual_seed(seed)
    x = torch.randn(2, N, checks.EMBED, dtype=torch.float64)
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[0, :2] = True
    mask[1, -3:] = True
    return x.masked_fill(mask[..., None], 1e3), mask


def _assert_real_close(y, expected, mask, tol=1e-10):
    torch.testing.assert_close(y[~mask], expected[~mask], rtol=tol, atol=tol)


@pytest.mark.parametrize("name,options,causal", CASES, ids=CASE_IDS)
def test_the_layer_equals_its_float64_reference_with_padding(name, options, causal):
    module = checks.build(name, causal, train=False, **options)
    module.chunk_size = 4  # several chunks, the last one partial
    x, mask = _padded_input()
    _assert_real_close(*_module_and_reference(module, x, mask), mask)


@pytest.mark.parametrize("kernel", ["positive", "relu"])
def test_performer_draws_fresh_iid_gaussian_features_in_training(kernel):
    """In training the features are torch.randn draws (H x m x d) of the global generator, one per forward."""
    module = checks.build("performer", True, train=True, kernel=kernel, num_features=12)
    x, mask = _padded_input()
    torch.manual_seed(7)
    y = module(x, mask)
    torch.manual_seed(7)
    w = torch.randn(checks.HEADS, 12, checks.EMBED // checks.HEADS, dtype=torch.float64)
    q, k, v = module.project(x)
    expected = reference(q, k, v, kernel, {"w": w}, causal=True, real=~mask, eps=module.feature_map.eps,
                         min_denominator=module.min_denominator)
    _assert_real_close(y, module.out_proj(expected.transpose(1, 2).reshape(x.shape)), mask)
    assert not torch.allclose(module(x, mask)[~mask], y[~mask])  # the next forward draws new features


# ---------------------------------------------------------------------- the three causal forms


def _form_inputs(kind, N=10, m=5, d=3, seed=0):
    """Random features as each map gives them, the last two keys of row 1 padded."""
    g = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    B, H = 2, 2
    fq, fk, v = randn(B, H, N, m).exp(), randn(B, H, N, m).exp(), randn(B, H, N, d)
    s = lam = None
    if kind == "trig":  # features of either sign
        fq, fk = randn(B, H, N, m), randn(B, H, N, m) + 0.5
    elif kind == "shifted":  # FAVOR+: large key log-scales
        s = 20 * randn(B, H, N)
    elif kind.endswith("gated"):  # RFA-gate: psi (1 - g), lambda = log g; with log-scales too
        logit = randn(B, H, N)
        fk, lam = fk * torch.sigmoid(-logit)[..., None], torch.nn.functional.logsigmoid(logit)
        if kind.startswith("shifted"):
            s = 20 * randn(B, H, N)
    real = torch.ones(B, N, dtype=torch.bool)
    real[1, -2:] = False
    return (fq, fk, v), dict(s=s, lam=lam, real=real, min_denominator=1e-3)


@pytest.mark.parametrize("kind", ["plain", "trig", "shifted", "gated", "shifted-gated"])
def test_the_quadratic_chunked_and_recurrent_causal_forms_agree(kind):
    args, options = _form_inputs(kind)
    quadratic = forms.causal_quadratic(*args, **options)
    real = options["real"]
    torch.testing.assert_close(forms.causal_recurrent(*args, **options)[real.expand(2, 2, -1)],
                               quadratic[real.expand(2, 2, -1)], rtol=1e-10, atol=1e-10)
    for chunk_size in (1, 3, 4, 10, 16):  # 3 and 4 do not divide N = 10
        chunked = forms.causal_chunked(*args, **options, chunk_size=chunk_size)
        assert torch.isfinite(chunked).all()
        torch.testing.assert_close(chunked[real.expand(2, 2, -1)], quadratic[real.expand(2, 2, -1)],
                                   rtol=1e-10, atol=1e-10, msg=lambda m: f"chunk size {chunk_size}: {m}")


def test_the_quadratic_form_is_the_masked_lower_triangular_attention():
    """Without shifts or decays: phi(Q) phi(K)^T, lower-triangular and masked, normalised per row."""
    (fq, fk, v), options = _form_inputs("trig")
    real = options["real"]
    A = (fq @ fk.transpose(-1, -2)).tril() * real[:, None, None, :]
    expected = (A @ v) / A.sum(-1, keepdim=True).clamp_min(1e-3)
    torch.testing.assert_close(forms.causal_quadratic(fq, fk, v, real=real, min_denominator=1e-3), expected)
    B = (fq @ (fk * real[:, None, :, None]).transpose(-1, -2))
    torch.testing.assert_close(forms.bidirectional(fq, fk, v, real=real, min_denominator=1e-3),
                               (B @ v) / B.sum(-1, keepdim=True).clamp_min(1e-3))


@pytest.mark.parametrize("kind", ["shifted", "shifted-gated"])
def test_the_chunked_form_has_exact_gradients_across_chunks(kind):
    (fq, fk, v), options = _form_inputs(kind, N=5, m=2, d=2)
    fq, fk, v = (t[:1, :1].clone().requires_grad_() for t in (fq, fk, v))
    s = options["s"][:1, :1].clone().requires_grad_()
    lam = None if options["lam"] is None else options["lam"][:1, :1].clone().requires_grad_()
    inputs = (fq, fk, v, s) + ((lam,) if lam is not None else ())

    def chunked(fq, fk, v, s, lam=None):
        return forms.causal_chunked(fq, fk, v, s, lam, options["real"][1:], 1e-3, chunk_size=2)

    assert torch.autograd.gradcheck(chunked, inputs)


# ---------------------------------------------------------------------- the estimators' means


def _z(samples, mean, variance):
    return ((samples.mean() - mean) / math.sqrt(variance / samples.numel())).item()


def _favor_pairs(d=4):
    """(q, k) pairs with |q~ + k~|^2 about 1 (positive estimator's variance finite and moderate)."""
    g = torch.Generator().manual_seed(11)
    pairs = []
    for cos in (0.9, 0.0, -0.6):
        q = torch.randn(d, generator=g, dtype=torch.float64)
        other = torch.randn(d, generator=g, dtype=torch.float64)
        other = other - (other @ q) / (q @ q) * q
        k = cos * q / q.norm() + math.sqrt(1 - cos**2) * other / other.norm()
        pairs.append((0.8 * q / q.norm() * d**0.25, 0.9 * k * d**0.25))
    return pairs


def _draws(fmap, q, k):
    """phi(q).phi(k) for each of R draws (the R heads of `fmap`, a training draw each), the key shift undone."""
    R = fmap.eval_rows.size(0)
    x = torch.stack([q, k])[None, None].expand(1, R, 2, q.numel())
    f = fmap(x, x, fixed=False)
    phi = f.k if f.k_log_scale is None else f.k * f.k_log_scale.exp()[..., None]
    return (phi[0, :, 0] * phi[0, :, 1]).sum(-1)  # R


def test_performer_positive_features_are_unbiased_for_exp_of_the_scaled_dot_product():
    """E phi(q).phi(k) = exp(q.k / sqrt(d)) with iid features; per draw the variance is exactly
    (1/m) e^{2 q~.k~} (e^{|q~ + k~|^2} - 1) (Choromanski et al. 2021, Lemma 2)."""
    R, m, d = 20000, 8, 4
    torch.manual_seed(0)
    fmap = FavorPlus(R, m, d, "positive").double()
    for q, k in _favor_pairs(d):
        qt, kt = q / d**0.25, k / d**0.25
        variance = (2 * qt @ kt).exp() * (((qt + kt) ** 2).sum().exp() - 1) / m
        z = _z(_draws(fmap, q, k), (q @ k / math.sqrt(d)).exp(), variance)
        assert abs(z) < Z_MAX, (z, q @ k)


def test_performer_relu_features_estimate_the_order_one_arc_cosine_kernel():
    """E phi(q).phi(k) = (|q~||k~| / 2 pi)(sin t + (pi - t) cos t) with eps = 0 (Cho and Saul 2009, with the
    m^-1/2 scaling); z-test with the empirical variance."""
    R, m, d = 20000, 8, 4
    torch.manual_seed(1)
    fmap = FavorPlus(R, m, d, "relu").double()
    fmap.eps = 0.0
    for q, k in _favor_pairs(d):
        qt, kt = q / d**0.25, k / d**0.25
        t = torch.arccos((qt @ kt) / (qt.norm() * kt.norm()))
        mean = qt.norm() * kt.norm() / (2 * math.pi) * (torch.sin(t) + (math.pi - t) * torch.cos(t))
        samples = _draws(fmap, q, k)
        assert abs(_z(samples, mean, samples.var().item())) < Z_MAX


def test_rfa_features_estimate_the_gaussian_kernel_of_the_normalised_inputs():
    """E phi(x).phi(y) = exp(-|x - y|^2 / 2 sigma^2) for unit x, y; per draw (D_rf iid frequencies) the variance
    is exactly (1 - e^{-|x - y|^2 / sigma^2})^2 / (2 D_rf)."""
    R, D, d, sigma = 20000, 8, 4, 0.7
    torch.manual_seed(2)
    fmap = RandomFourier(R, D, d).double()
    with torch.no_grad():
        fmap.log_sigma.fill_(math.log(sigma))
    for x, y in _favor_pairs(d):
        gap = ((x / x.norm() - y / y.norm()) ** 2).sum()
        variance = (1 - (-gap / sigma**2).exp()) ** 2 / (2 * D)
        z = _z(_draws(fmap, 3 * x, y), (-gap / (2 * sigma**2)).exp(), variance)  # 3 x: the map normalises
        assert abs(z) < Z_MAX


@pytest.mark.parametrize("causal", [False, True])
def test_favor_max_shift_stabilisers_cancel_with_padding(causal):
    """The query row's shift and the keys' shift (over the real keys the query sees) leave the output of the
    unshifted features (the reference's) unchanged, on inputs large enough that the shifts are far from 0."""
    module = checks.build("performer", causal, train=False)
    module.chunk_size = 4
    with torch.no_grad():
        module.q_proj.weight.mul_(4)
        module.k_proj.weight.mul_(4)
    x, mask = _padded_input()
    _assert_real_close(*_module_and_reference(module, x, mask), mask, tol=1e-9)


def favor_plus(q, k, v, w, causal):
    """FAVOR+ by its definition in float64, nothing shifted, added or clamped (Choromanski et al. 2021, Lemma 1
    and section 2.3): phi(x) = m^-1/2 exp(w_i.x~ - |x~|^2/2), x~ = x d^-1/4, and
    y = phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1); causal: the prefix sums over m <= n, written as the
    lower-triangular part of phi(Q) phi(K)^T. q, k, v: ... x N x d; w: m x d."""
    q, k, v, w = (t.double() for t in (q, k, v, w))

    def phi(x):
        x = x * x.size(-1) ** -0.25
        return torch.exp(x @ w.T - (x * x).sum(-1, keepdim=True) / 2) / w.size(0) ** 0.5

    fq, fk = phi(q), phi(k)
    if causal:
        A = (fq @ fk.transpose(-1, -2)).tril()
        return (A @ v) / A.sum(-1, keepdim=True)
    return (fq @ (fk.transpose(-1, -2) @ v)) / (fq @ fk.sum(-2)[..., None])


def _relative(y, expected):
    return ((y - expected).norm() / expected.norm()).item()


# the inputs' q and k entries: N(0, 1) (random), and N(0, 4), whose logits q.k / sqrt(d) spread with standard
# deviation 4 and reach about 20 at N = 2048: the peaked attention of a trained model
FAVOR_SCALES = {"random": 1.0, "large": 2.0}


@pytest.mark.parametrize("N", [64, 512, 2048])
@pytest.mark.parametrize("m", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_performer_is_favor_plus_by_its_definition_at_the_papers_sizes(causal, m, N):
    """One head of d = 64, the layer's evaluation features, float64: the layer (its chunked causal form), the
    quadratic causal form and incremental decoding are all FAVOR+ to 1e-6 relative (Frobenius), over all
    positions and over the first 8 (a causal query there sees few keys)."""
    torch.manual_seed(0)
    module = registry.build("performer", 64, 1, causal=causal, num_features=m).double().eval()
    w = module.feature_map.eval_rows[0]
    g = torch.Generator().manual_seed(N + m)
    x = torch.zeros(1, N, 64, dtype=torch.float64)  # read by gated maps only
    for name, scale in FAVOR_SCALES.items():
        q, k = (scale * torch.randn(1, 1, N, 64, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(1, 1, N, 64, generator=g, dtype=torch.float64)
        expected = favor_plus(q, k, v, w, causal)
        outputs = {"layer": module.attend(x, q, k, v, None)}
        if causal:
            f = module.feature_map(q, k, fixed=True)
            outputs["quadratic"] = forms.causal_quadratic(f.q, f.k, v, f.k_log_scale)
            cache = {}
            outputs["decoding"] = torch.cat([module.step(x[:, t : t + 1], q[..., t : t + 1, :], k[..., t : t + 1, :],
                                                         v[..., t : t + 1, :], cache) for t in range(N)], -2)
        for form, y in outputs.items():
            for part in (slice(None), slice(0, 8)):
                error = _relative(y[..., part, :], expected[..., part, :])
                assert error < 1e-6, f"{name} inputs, {form}, positions {part}: {error:.2e} from FAVOR+"


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_performer_is_finite_in_float32_and_bfloat16_autocast_with_logits_up_to_30(causal):
    """Queries and keys projected so that the largest |q.k| / sqrt(d) is 30 (d = 64, m = 256, N = 512, a padded
    row): float32 and bfloat16 autocast outputs are finite, float32 within 1e-3 of float64, and so are the
    gradients of a training forward (fresh features) under autocast; causal decoding is finite under autocast."""
    torch.manual_seed(0)
    module = registry.build("performer", 128, 2, causal=causal)
    N = 512
    x = torch.randn(2, N, 128)
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[1, -100:] = True
    with torch.no_grad():
        q, k, _ = module.project(x)
        factor = (30 / ((q @ k.transpose(-1, -2)).abs().amax() / 8)) ** 0.5
        for proj in (module.q_proj, module.k_proj):
            proj.weight.mul_(factor)
            proj.bias.mul_(factor)
        q, k, _ = module.project(x)
        assert abs((q @ k.transpose(-1, -2)).abs().amax() / 8 - 30) < 1e-3
    module.eval()
    with torch.no_grad():
        expected = module.double()(x.double(), mask).float()
        module.float()
        torch.testing.assert_close(module(x, mask)[~mask], expected[~mask], rtol=1e-3, atol=1e-3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.isfinite(module(x, mask)).all()
            if causal:
                assert torch.isfinite(module(x[:1, :64], cache={})).all()
    module.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = module(x, mask)
    assert torch.isfinite(y).all()
    y[~mask].float().square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())


def test_favor_stabilisers_keep_float32_accurate_where_the_plain_features_underflow():
    """Large q, k (logits q.k / sqrt(d) in the hundreds): every plain feature exp(w.x~ - |x~|^2/2) of some keys is
    0 in float32 (0/0 unshifted); the shifted features give the float64 outputs. (At logits in the thousands the
    shifted features of one query span more than float32's exponent range, and float32 no longer does.)"""
    module = checks.build("performer", True, train=False)
    with torch.no_grad():
        module.q_proj.weight.mul_(15)
        module.k_proj.weight.mul_(15)
    x = torch.randn(2, 9, checks.EMBED, dtype=torch.float64)
    expected = module(x)
    module.float()
    _, k, _ = module.project(x.float())
    assert (positive_logits(k, module.feature_map.eval_rows).exp() == 0).all(-1).any()
    torch.testing.assert_close(module(x.float()), expected.float(), rtol=1e-4, atol=1e-4)


def test_half_precision_runs_the_linear_attention_in_float32():
    module = checks.build("performer", True, train=False).float()
    x = torch.randn(2, 9, checks.EMBED)
    expected = module(x)
    half = module.half()
    y = half(x.half())
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.float(), expected, rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------- RFA's gate


def _gated_rfa(chunk_size=3):
    module = checks.build("rfa", True, train=False, gate=True, num_features=6)
    module.chunk_size = chunk_size
    torch.manual_seed(3)
    x = torch.randn(2, 8, checks.EMBED, dtype=torch.float64)
    return module, x


def test_rfa_gated_recurrence_equals_its_parallel_decay_form():
    """S_t = g_t S_{t-1} + (1 - g_t) phi(k_t) v_t^T, z likewise, token by token in float64, equals the layer's
    chunked parallel form (weights phi(q_t).phi(k_i) (1 - g_i) prod_{j=i+1..t} g_j)."""
    module, x = _gated_rfa()
    q, k, v = module.project(x)
    f = module.feature_map(q, k, fixed=True)
    g = torch.sigmoid(module.gate(x)).transpose(1, 2)[..., None, None]  # B x H x N x 1 x 1
    S = torch.zeros(2, checks.HEADS, f.q.size(-1), v.size(-1), dtype=torch.float64)
    z = torch.zeros(2, checks.HEADS, f.q.size(-1), 1, dtype=torch.float64)
    ys = []
    for t in range(x.size(1)):
        phi_k = f.k[:, :, t, :, None]
        S = g[:, :, t] * S + (1 - g[:, :, t]) * phi_k * v[:, :, t, None, :]
        z = g[:, :, t] * z + (1 - g[:, :, t]) * phi_k
        phi_q = f.q[:, :, t, None, :]
        ys.append((phi_q @ S) / (phi_q @ z).clamp_min(module.min_denominator))
    recurrence = torch.cat(ys, 2)
    torch.testing.assert_close(module.attend(x, q, k, v, None), recurrence, rtol=1e-10, atol=1e-10)


def test_a_closed_rfa_gate_returns_the_values():
    """g = 0 everywhere: S_t = phi(k_t) v_t^T, so y_t = v_t wherever phi(q_t).phi(k_t) > 0 (here q = k, where the
    trigonometric features give phi(q).phi(q) = 1)."""
    module, x = _gated_rfa()
    with torch.no_grad():
        module.gate.weight.zero_()
        module.gate.bias.fill_(-1e4)
    q, _, v = module.project(x)
    torch.testing.assert_close(module.attend(x, q, q, v, None), v, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------- evaluation, options, cost


@pytest.mark.parametrize("name", ["performer", "rfa"])
def test_evaluation_is_deterministic_and_its_features_survive_save_and_load(name):
    module = checks.build(name, True, train=False, seed=0)
    x = torch.randn(2, 7, checks.EMBED, dtype=torch.float64)
    y = checks.run(module, x, seed=1)
    torch.testing.assert_close(checks.run(module, x, seed=2), y, rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    other = checks.build(name, True, train=False, seed=5)
    assert not torch.allclose(other(x), y)
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(other(x), y, rtol=0, atol=0)
    module.train()
    assert not torch.allclose(checks.run(module, x, seed=1), checks.run(module, x, seed=2))


@pytest.mark.parametrize("name,options,message", [
    ("performer", {"num_features": 0}, "num_features must be a positive integer, got 0"),
    ("performer", {"kernel": "softmax"}, "kernel must be one of positive, relu; got 'softmax'"),
    ("rfa", {"num_features": -2}, "num_features must be a positive integer, got -2"),
    ("rfa", {"gate": True}, "gate must be false for bidirectional attention"),
    ("t2r", {"num_features": 0}, "num_features must be a positive integer, got 0"),
])
def test_a_bad_option_is_named_even_on_the_meta_device(name, options, message):
    with torch.device("meta"), pytest.raises(ValueError, match=message):
        registry.build(name, 16, 2, **options)


def test_every_variant_builds_on_the_meta_device():
    with torch.device("meta"):
        for name, options, directions in VARIANTS:
            for causal in directions:
                registry.build(name, 64, 4, causal=causal, **options)


def test_costs_follow_the_features():
    D, H = 768, 12
    assert registry.get("performer").macs_per_token(2048, D, H) == 4 * 256 * D
    assert registry.get("performer").macs_per_token(2048, D, H, num_features=128) == 4 * 128 * D
    assert registry.get("rfa").macs_per_token(2048, D, H) == 6 * 64 * D
    assert registry.get("rfa").macs_per_token(2048, D, H, causal=True, gate=True) == 6 * 64 * D + D * H
    assert registry.get("elu").macs_per_token(2048, D, H) == 2 * 64 * D
    assert registry.get("t2r").macs_per_token(2048, D, H) == 4 * 32 * D


# ---------------------------------------------------------------------- the shared checks


@pytest.mark.parametrize("name,options,directions", VARIANTS, ids=IDS)
def test_the_shared_checks_hold(name, options, directions):
    for causal in directions:
        checks.check_padding(name, causal=causal, **options)
    if True in directions:
        checks.check_no_future(name, **options)
        checks.check_incremental(name, **options)


# gradcheck of the whole layer is slow (hundreds of forwards): the quick suite checks the causal FAVOR+ layer
# (shifts, chunks); the chunked form's own gradcheck above covers the gate's decay
QUICK_GRADIENTS = {("performer-positive", True)}
GRADIENT_CASES = [pytest.param(name, options, causal, marks=() if (i, causal) in QUICK_GRADIENTS else pytest.mark.slow,
                               id=f"{i}-{'causal' if causal else 'bidirectional'}")
                  for i, (name, options, directions) in zip(IDS, VARIANTS) for causal in directions]


@pytest.mark.parametrize("name,options,causal", GRADIENT_CASES)
def test_gradients(name, options, causal):
    checks.check_gradients(name, causal=causal, **options)


def test_the_printed_model_shows_each_feature_maps_options():
    from fairseq_eva.attention import registry

    assert "FavorPlus(heads=4, num_features=32, head_dim=16, kernel=relu)" in str(
        registry.build("performer", 64, 4, num_features=32, kernel="relu"))
    assert "TrainedReLU(heads=4, num_features=8, head_dim=16)" in str(registry.build("t2r", 64, 4, causal=True, num_features=8))
    assert "RandomFourier(heads=4, num_features=16, head_dim=16)" in str(registry.build("rfa", 64, 4, num_features=16))
