"""Combiner-Fixed (DeepSets-Max): the module against its float64 reference with padding; a span covering the
sequence, and spans of one token with plain max-pooling, are softmax attention; two queries of one span weigh
the keys of any other span proportionally (rank-1 blocks); a query's own span is attended directly, never
through its abstraction; the per-place bias table against the reference; the shared checks (padding, gradients);
options named in their errors; the cost."""

import mechanism_checks as checks
import pytest
import torch
from mechanism_checks import assert_real_close, expected_output

from fairseq_eva.attention import combiner, registry
from fairseq_eva.attention import softmax as softmax_module

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

N, EMBED = 10, checks.EMBED


def right_padded(lengths=(N, 6)):
    """x (B x N x EMBED) and its key padding mask, row b with lengths[b] real tokens first."""
    torch.manual_seed(7)
    x = torch.randn(len(lengths), N, EMBED, dtype=torch.float64)
    mask = torch.arange(N)[None, :] >= torch.tensor(lengths)[:, None]
    return x, mask


def softmax(q, k, v, real):
    return softmax_module.reference(q, k, v, real=real)


@pytest.mark.parametrize("abstraction", combiner.ABSTRACTIONS)
def test_equals_its_float64_reference_with_padding(abstraction):
    module = checks.build("combiner", train=False, span=3, abstraction=abstraction)
    x, mask = right_padded()
    expected = expected_output(module, x, mask, lambda q, k, v, real: combiner.reference(
        q, k, v, 3, real, module.q_abstraction, module.k_abstraction, module.rpe))
    assert_real_close(module(x, mask), expected, mask)


def test_the_bias_table_equals_its_float64_reference_with_padding():
    """rpe_type table: one bias per head and (query place, key place) in the span (the paper's masked-LM count)."""
    module = checks.build("combiner", train=False, span=3, rpe_type="table")
    with torch.no_grad():
        module.rpe.bias.normal_(std=1.0)  # (not its small start: a wrong place would show)
    assert module.rpe.bias.shape == (module.num_heads, 3, 3)
    x, mask = right_padded()
    expected = expected_output(module, x, mask, lambda q, k, v, real: combiner.reference(
        q, k, v, 3, real, module.q_abstraction, module.k_abstraction, place_bias=module.rpe.bias))
    assert_real_close(module(x, mask), expected, mask)


def test_the_bias_table_on_a_sequence_shorter_than_the_span():
    module = checks.build("combiner", train=False, span=N + 5, rpe_type="table")
    with torch.no_grad():
        module.rpe.bias.normal_(std=1.0)
    x, mask = right_padded()
    expected = expected_output(module, x, mask, lambda q, k, v, real: combiner.reference(
        q, k, v, N + 5, real, place_bias=module.rpe.bias))
    assert_real_close(module(x, mask), expected, mask)


@pytest.mark.parametrize("span", [N, N + 5])
def test_a_span_covering_the_sequence_is_softmax(span):
    module = checks.build("combiner", train=False, span=span, use_rpe=False)
    x, mask = right_padded()
    assert_real_close(module(x, mask), expected_output(module, x, mask, softmax), mask)


def test_spans_of_one_token_with_max_pooling_are_softmax():
    module = checks.build("combiner", train=False, span=1, abstraction="max", use_rpe=False)
    x, mask = right_padded()
    assert_real_close(module(x, mask), expected_output(module, x, mask, softmax), mask)


def attention_matrix(module, length=N):
    """A (H x N x N) with y = A v for one row of `length` real tokens of N, and the row's q, k (H x N x d). attend is
    linear in v (nothing else depends on v): probe j, v_m = [m == j, 0, ...], gives column j of A; the N probes
    run as one batch."""
    torch.manual_seed(8)
    x = torch.randn(1, N, EMBED, dtype=torch.float64)
    with torch.no_grad():
        q, k, _ = module.project(x)
        v = torch.zeros(N, module.num_heads, N, module.head_dim, dtype=torch.float64)
        v[..., 0] = torch.eye(N, dtype=torch.float64)[:, None, :]
        probes = (t.expand(N, *t.shape[1:]) for t in (x, q, k))
        y = module.attend(*probes, v, torch.full((N,), length))
    return y[..., 0].permute(1, 2, 0), q[0], k[0]


def test_two_queries_of_one_span_weigh_another_span_proportionally():
    s, length = 3, 8  # spans [0, 3) [3, 6) [6, 8), then pads
    module = checks.build("combiner", train=False, span=s)
    A, _, _ = attention_matrix(module, length)
    for own in range(0, length, s):
        queries = range(own, min(own + s, length))
        for other in range(0, length, s):
            if other == own:
                continue
            block = A[:, queries, other : min(other + s, length)]  # H x queries x keys
            assert (block.sum(-1) > 1e-3).all()
            shape = block / block.sum(-1, keepdim=True)  # each query's distribution over the other span's keys
            torch.testing.assert_close(shape, shape[:, :1].expand_as(shape), rtol=1e-10, atol=1e-12)
    ones = torch.ones(module.num_heads, length, dtype=torch.float64)
    torch.testing.assert_close(A[:, :length].sum(-1), ones, rtol=1e-12, atol=1e-12)
    assert A[:, :, length:].abs().max() == 0  # pads get no weight


def test_the_own_span_is_attended_directly_never_through_its_abstraction():
    """Within its own span, a query's weights are exactly softmax(q_i.k_j / sqrt(d)) up to one factor: an own-span
    abstraction would add a second term, shared by the span's queries, to them."""
    s, length = 4, 9
    module = checks.build("combiner", train=False, span=s, use_rpe=False)
    A, q, k = attention_matrix(module, length)
    for i in range(length):
        own = slice(i - i % s, min(i - i % s + s, length))
        weights = A[:, i, own]
        direct = torch.softmax(q[:, i : i + 1] @ k[:, own].transpose(-1, -2) / module.head_dim**0.5, -1)[:, 0]
        torch.testing.assert_close(weights / weights.sum(-1, keepdim=True), direct, rtol=1e-10, atol=1e-12)
        assert (weights.sum(-1) < 1 - 1e-3).all()  # the other spans take part of the mass


@pytest.mark.parametrize("options", [dict(span=2), dict(span=5, abstraction="max"), dict(span=4, rpe_type="table")])
def test_padding_changes_nothing_for_the_real_tokens(options):
    checks.check_padding("combiner", **options)


@pytest.mark.parametrize("options", [dict(span=2), dict(span=2, rpe_type="table")])
def test_gradients(options):
    checks.check_gradients("combiner", **options)


@pytest.mark.parametrize("options,message", [
    (dict(span=0), "span must be a positive integer, got 0"),
    (dict(abstraction="mean"), "abstraction must be one of deepsets-max, max; got 'mean'"),
    (dict(use_rpe="yes"), "use_rpe must be true or false"),
    (dict(rpe_type="grid"), "rpe_type must be one of buckets, table; got 'grid'"),
    (dict(use_rpe=False, rpe_type="table"), "rpe_type table is a bias inside the span: it needs use_rpe true"),
])
def test_a_bad_option_is_named(options, message):
    with pytest.raises(ValueError, match=message):
        registry.build("combiner", 16, 2, **options)


def test_builds_on_the_meta_device_and_is_refused_as_causal():
    with torch.device("meta"):
        module = registry.build("combiner", 768, 12)
    assert module.q_abstraction[0].weight.shape == (64, 64)
    with pytest.raises(ValueError, match="combiner attention is bidirectional only"):
        registry.build("combiner", 16, 2, causal=True)


def test_cost_is_the_papers_masked_lm_count():
    D = 768  # 2 (s + N/s - 1) D + 2 D + 2 d D at N = 2048, s = 256, d = 64: 656 D
    assert registry.get("combiner").macs_per_token(2048, D, 12) == 656 * D
    assert registry.get("combiner").macs_per_token(2048, D, 12, abstraction="max") == 528 * D
    assert registry.get("combiner").macs_per_token(100, D, 12) == 2 * 100 * D  # one span: softmax
