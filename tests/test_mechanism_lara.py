"""LARA: the module against its float64 reference (padding, uneven segments, more proposals than tokens, training
with the seed replayed and evaluation); its exact special cases: one proposal is one-sample self-normalised
importance sampling, the same for every query; proposals centred at 0 with balance-heuristic weights are linear
attention with positive features exp((omega_c.x - |x|^2/2)/sqrt(d)); evaluation is deterministic; proposals of
empty segments carry no weight; the shared checks (padding on both sides, gradients)."""

import math

import mechanism_checks as checks
import pytest
import torch

from fairseq_eva.attention import lara, registry

EMBED, HEADS = checks.EMBED, checks.HEADS
D_HEAD = EMBED // HEADS


def layer(train=True, **options):
    return checks.build("lara", train=train, **options)


def padded_batch(N=10, lengths=(10, 7), seed=0):
    """x (B x N x EMBED) and its padding mask, each row's real tokens first (the layout `attend` gets)."""
    torch.manual_seed(seed)
    x = torch.randn(len(lengths), N, EMBED, dtype=torch.float64)
    mask = torch.arange(N)[None, :] >= torch.tensor(lengths)[:, None]
    return x, mask


def noise_of(module, seed):
    """The draws omega_c - mu_c (H x C x d, shared by the rows) of a training forward after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    return torch.randn(HEADS, module.num_landmarks, D_HEAD, dtype=torch.float64)


def expected(module, x, mask, noise):
    q, k, v = module.project(x)
    y = lara.reference(q, k, v, module.sigma_q, module.sigma_k, module.num_landmarks, module.mis,
                       module.alpha_coeff, noise=noise, real=~mask)
    return module.out_proj(y.transpose(1, 2).reshape(x.shape))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("options", [
    dict(num_landmarks=3),  # 10 = 4 + 4 + 2 and 7 = 3 + 3 + 1: uneven segments
    dict(num_landmarks=4, mis="mis-bh"),  # 10 -> 3 + 3 + 3 + 1; 7 -> 2 + 2 + 2 + 1
    dict(num_landmarks=4, alpha_coeff=30.0, proposal="linear"),  # large lambda: some alpha clamped
    dict(num_landmarks=12),  # N <= C: every token a segment, the other proposals empty
])
def test_equals_its_float64_reference_with_padding(train, options):
    module = layer(train, **options)
    x, mask = padded_batch()
    torch.manual_seed(7)
    y = module(x, mask)
    want = expected(module, x, mask, noise_of(module, 7) if train else None)
    torch.testing.assert_close(y[~mask], want[~mask], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("train", [True, False])
def test_one_proposal_is_one_sample_self_normalised_importance_sampling(train):
    """C = 1: y_n = sum_m xi(k_m, omega) v_m / sum_m xi(k_m, omega) for every query, omega = mu (+ the draw)."""
    module = layer(train, num_landmarks=1)
    x, mask = padded_batch()
    lengths = (~mask).sum(1)
    q, k, v = module.project(x)
    torch.manual_seed(3)
    y = module.attend(x, q, k, v, lengths)
    noise = noise_of(module, 3) if train else torch.zeros(HEADS, 1, D_HEAD, dtype=torch.float64)
    for b, L in enumerate(lengths.tolist()):
        qs, ks = module.sigma_q(q[b, :, :L]), module.sigma_k(k[b, :, :L])  # H x L x d
        omega = qs.mean(1) + ks.mean(1) + noise[:, 0]  # H x d
        logits = (k[b, :, :L] @ omega[..., None]).squeeze(-1) - k[b, :, :L].square().sum(-1) / 2
        weights = torch.softmax(logits / math.sqrt(D_HEAD), -1)  # H x L
        snis = (weights[..., None] * v[b, :, :L]).sum(1)  # H x d
        torch.testing.assert_close(y[b, :, :L], snis[:, None].expand(HEADS, L, D_HEAD), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("options", [dict(mis="mis-bh"), dict(mis="mis-opt", alpha_coeff=0.0), dict(mis="mis-opt")])
def test_proposals_at_zero_with_balance_heuristic_weights_are_positive_random_feature_attention(options):
    """sigma = 0 makes mu_c = 0 and omega_c a N(0, I) draw: the balance heuristic is 1 / C and LARA is linear
    attention with the C features phi_c(x) = exp((omega_c.x - |x|^2 / 2) / sqrt(d)). mis-opt reduces to it too:
    q~_c = 0 makes r_nc uniform over the queries, so its correction vanishes whatever lambda."""
    module = layer(True, num_landmarks=3, proposal="linear", **options)
    for sigma in (module.sigma_q, module.sigma_k):
        torch.nn.init.zeros_(sigma.weight)
        torch.nn.init.zeros_(sigma.bias)
    x, mask = padded_batch()
    lengths = (~mask).sum(1)
    q, k, v = module.project(x)
    torch.manual_seed(5)
    y = module.attend(x, q, k, v, lengths)
    omega = noise_of(module, 5)  # H x C x d

    def phi(t):  # B x H x N x C
        return torch.exp((t @ omega.transpose(-1, -2) - t.square().sum(-1, keepdim=True) / 2) / math.sqrt(D_HEAD))

    phi_k = phi(k) * (~mask)[:, None, :, None]
    want = (phi(q) @ (phi_k.transpose(-1, -2) @ v)) / (phi(q) @ phi_k.sum(2)[..., None])
    torch.testing.assert_close(y[~mask[:, None].expand(-1, HEADS, -1)], want[~mask[:, None].expand(-1, HEADS, -1)],
                               rtol=1e-12, atol=1e-12)


def test_evaluation_is_deterministic_and_training_samples():
    x, mask = padded_batch()
    module = layer(False, num_landmarks=3)
    first, second = checks.run(module, x, mask, seed=1), checks.run(module, x, mask, seed=2)
    assert torch.equal(first, second)
    module.train()
    assert not torch.allclose(checks.run(module, x, mask, seed=1), checks.run(module, x, mask, seed=2))


def test_empty_segments_are_no_proposal():
    """With N <= C every token is a segment; more proposals only add empty segments, which change nothing."""
    x, mask = padded_batch()
    module = layer(False, num_landmarks=10)
    y = module(x, mask)
    module.num_landmarks = 25
    torch.testing.assert_close(module(x, mask)[~mask], y[~mask], rtol=1e-12, atol=1e-12)


def test_a_row_of_pads_returns_zeros_and_finite_gradients():
    module = layer(True, num_landmarks=3)
    x, mask = padded_batch()
    x.requires_grad_()
    mask[1] = True
    y = module(x, mask)
    torch.testing.assert_close(y[1], module.out_proj.bias.expand(10, EMBED))  # zeros before the out projection
    y.sum().backward()
    assert all(p.grad.isfinite().all() for p in module.parameters()) and x.grad.isfinite().all()
    assert torch.equal(x.grad[1], torch.zeros_like(x.grad[1]))


@pytest.mark.parametrize("train", [True, False])
def test_the_shared_padding_check(train):
    checks.check_padding("lara", train=train, num_landmarks=4)
    checks.check_padding("lara", train=train)  # the default C = 256 > N


def test_the_shared_gradient_check():
    checks.check_gradients("lara", num_landmarks=4)


def test_bidirectional_only_and_bad_options_named():
    with pytest.raises(ValueError, match="lara attention is bidirectional only; causal choices"):
        registry.build("lara", 16, 2, causal=True)
    for option, value in (("num_landmarks", 0), ("mis", "mis-biased"), ("alpha_coeff", math.nan),
                          ("proposal", "pool")):
        with pytest.raises(ValueError, match=f"^{option} must"):
            registry.build("lara", 16, 2, **{option: value})
    with torch.device("meta"):
        registry.build("lara", 16, 2)


def test_cost_is_five_c_d_plus_two_d_d():
    assert registry.get("lara").macs_per_token(2048, 768, 12) == 5 * 256 * 768 + 2 * 64 * 768  # 1408 D
    assert registry.get("lara").macs_per_token(2048, 768, 12, num_landmarks=16) == (5 * 16 + 2 * 64) * 768


def test_half_precision_runs_in_float32_inside():
    module = registry.build("lara", 16, 2, num_landmarks=3).to(torch.bfloat16)
    x, mask = padded_batch()
    y = module(x.to(torch.bfloat16) * 30, mask)
    assert y.dtype == torch.bfloat16 and y.isfinite().all()


def test_landmarks_beyond_the_length_cost_nothing():
    """C' = min(C, N) segments are laid out: a million landmarks on 10 tokens compute what 10 do, at their cost."""
    x, mask = padded_batch()
    module = layer(False, num_landmarks=10)
    y = module(x, mask)
    module.num_landmarks = 10**6  # B x H x C x N would be 320 GB in float64
    torch.testing.assert_close(module(x, mask)[~mask], y[~mask], rtol=1e-12, atol=1e-12)
