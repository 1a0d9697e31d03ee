"""Transformer-LS: the module against its float64 reference with padding (DualLN in both orders, landmarks,
relative position bias), the two orders being different functions; without landmarks and DualLN it is the
registry's block-local attention; W^P = 0 makes every landmark the mean key and value (one summary with logit +
log r); a window covering the sequence without landmarks or LN is softmax; the shared checks (padding,
gradients); options named in their errors; the cost."""

import math

import mechanism_checks as checks
import pytest
import torch
from mechanism_checks import assert_real_close, expected_output

from fairseq_eva.attention import long_short, registry
from fairseq_eva.attention import softmax as softmax_module
from fairseq_eva.attention.eva import EVAAttention

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

N, EMBED = 10, checks.EMBED


def padded(lengths=(N, 6), left=False):
    """x (B x N x EMBED) and its key padding mask, row b with lengths[b] real tokens (after the pads if left)."""
    torch.manual_seed(7)
    x = torch.randn(len(lengths), N, EMBED, dtype=torch.float64)
    mask = torch.arange(N)[None, :] >= torch.tensor(lengths)[:, None]
    return x, (mask.flip(1) if left else mask)


def softmax(q, k, v, real):
    return softmax_module.reference(q, k, v, real=real)


def layer_norm(norm):
    return None if norm is None else (norm.weight, norm.bias, norm.eps)


def _with_dual_ln(order):
    module = checks.build("long_short", train=False, window_size=3, num_landmarks=3, dual_ln_order=order)
    for norm in (module.local_norm, module.landmark_norm):  # not the identity-like start
        torch.nn.init.normal_(norm.weight)
        torch.nn.init.normal_(norm.bias)
    return module


@pytest.mark.parametrize("order", long_short.DUAL_LN_ORDERS)
def test_equals_its_float64_reference_with_padding(order):
    """norm_first: K~ = LN_G(P^T LN_L(K)) (NVIDIA's code); project_first: K~ = LN_G(P^T K) (the paper's)."""
    module = _with_dual_ln(order)
    x, mask = padded()
    expected = expected_output(module, x, mask, lambda q, k, v, real: long_short.reference(
        x, q, k, v, 3, real, module.landmarks.weight.T, layer_norm(module.local_norm),
        layer_norm(module.landmark_norm), module.rpe, dual_ln_order=order))
    assert_real_close(module(x, mask), expected, mask)


def test_the_two_dual_ln_orders_are_different_functions():
    """The same parameters give other outputs in the other order (P mixes other keys): the option matters."""
    x, mask = padded()
    norm_first = _with_dual_ln("norm_first")
    project_first = _with_dual_ln("project_first")
    project_first.load_state_dict(norm_first.state_dict())
    gap = (norm_first(x, mask) - project_first(x, mask))[~mask].abs().max()
    assert gap > 1e-2, gap


def test_without_landmarks_and_dual_ln_it_is_the_registrys_local_attention():
    x, mask = padded(left=True)
    module = checks.build("long_short", train=False, window_size=3, num_landmarks=0, dual_ln=False)
    local = checks.build("local", train=False, window_size=3)  # with its relative position bias, as module's
    local.load_state_dict(module.state_dict())
    torch.testing.assert_close(module(x, mask), local(x, mask), rtol=1e-12, atol=1e-12)
    # and without the bias (the registry's local takes no use_rpe: its class, EVA without chunks)
    module = checks.build("long_short", train=False, window_size=3, num_landmarks=0, dual_ln=False, use_rpe=False)
    local = EVAAttention(EMBED, checks.HEADS, window_size=3, num_chunks=0, use_rpe=False).double().eval()
    local.load_state_dict(module.state_dict())
    torch.testing.assert_close(module(x, mask), local(x, mask), rtol=1e-12, atol=1e-12)


def test_a_zero_projection_makes_every_landmark_the_mean_key_and_value():
    r, w = 4, 3
    module = checks.build("long_short", train=False, window_size=w, num_landmarks=r, dual_ln=False, use_rpe=False)
    torch.nn.init.zeros_(module.landmarks.weight)
    x, mask = padded()
    q, k, v = module.project(x)
    lengths = (~mask).sum(1)
    k_summary, beta = module.dynamic_projection(x, k, v, lengths)
    for b, L in enumerate(lengths):
        for summary, t in ((k_summary, k), (beta, v)):
            torch.testing.assert_close(summary[b], t[b, :, :L].mean(1, keepdim=True).expand(-1, r, -1))

    def one_summary(q, k, v, real):
        """Dense: [the block's keys ; the mean key with logit + log r] per query."""
        position = torch.arange(N)
        hidden = ~real[:, None, None, :] | (position[:, None] // w != position[None, :] // w)  # B x 1 x N x N
        logits = (q @ k.transpose(-1, -2) / module.head_dim**0.5).masked_fill(hidden, float("-inf"))
        mean_k, mean_v = ((t * real[:, None, :, None]).sum(2, keepdim=True) / real.sum(1)[:, None, None, None]
                          for t in (k, v))
        summary = q @ mean_k.transpose(-1, -2) / module.head_dim**0.5 + math.log(r)
        p = torch.softmax(torch.cat([logits, summary], -1), -1)
        return p[..., :N] @ v + p[..., N:] * mean_v

    assert_real_close(module(x, mask), expected_output(module, x, mask, one_summary), mask)


@pytest.mark.parametrize("window_size", [N, N + 3])
def test_a_window_covering_the_sequence_without_landmarks_or_ln_is_softmax(window_size):
    module = checks.build("long_short", train=False, window_size=window_size, num_landmarks=0, dual_ln=False,
                          use_rpe=False)
    x, mask = padded()
    assert_real_close(module(x, mask), expected_output(module, x, mask, softmax), mask)


@pytest.mark.parametrize("options", [dict(window_size=2, num_landmarks=3), dict(window_size=5, num_landmarks=0),
                                     dict(window_size=2, num_landmarks=3, dual_ln_order="project_first")])
def test_padding_changes_nothing_for_the_real_tokens(options):
    checks.check_padding("long_short", **options)


@pytest.mark.parametrize("order", long_short.DUAL_LN_ORDERS)
def test_gradients(order):
    checks.check_gradients("long_short", **dict(window_size=2, num_landmarks=3, dual_ln_order=order))


@pytest.mark.parametrize("options,message", [
    (dict(window_size=0), "window_size must be a positive integer, got 0"),
    (dict(num_landmarks=-1), "num_landmarks must be an integer >= 0, got -1"),
    (dict(dual_ln=1), "dual_ln must be true or false"),
    (dict(use_rpe=None), "use_rpe must be true or false"),
    (dict(dual_ln_order="paper"), "dual_ln_order must be one of norm_first, project_first; got 'paper'"),
])
def test_a_bad_option_is_named(options, message):
    with pytest.raises(ValueError, match=message):
        registry.build("long_short", 16, 2, **options)


def test_builds_on_the_meta_device_and_is_refused_as_causal():
    with torch.device("meta"):
        module = registry.build("long_short", 768, 12)
    assert module.landmarks.weight.shape == (12 * 128, 768)
    with pytest.raises(ValueError, match="long_short attention is bidirectional only"):
        registry.build("long_short", 16, 2, causal=True)


def test_cost_is_the_papers_masked_lm_count():
    D = 768  # 2 (w + r) D + H r D + 2 r D at N = 2048, w = 256, r = 128, H = 12: 2560 D
    assert registry.get("long_short").macs_per_token(2048, D, 12) == 2560 * D
