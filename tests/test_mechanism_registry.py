"""The registry of attention mechanisms: every entry builds in the directions it names and is refused in the
others with one line naming the choices that can; the shared checks (tests/mechanism_checks.py) hold for
softmax and local attention; a mechanism's cost grows with N only where it is quadratic."""

import mechanism_checks as checks
import pytest
import torch

from fairseq_eva.attention import registry
from fairseq_eva.attention import softmax as softmax_module


@pytest.mark.parametrize("name", registry.choices())
def test_every_mechanism_builds_in_its_directions_and_is_refused_in_the_others(name):
    mechanism = registry.get(name)
    for causal, direction in ((False, registry.BIDIRECTIONAL), (True, registry.CAUSAL)):
        options = {"num_chunks": 0, "chunk_size": 4} if name == "eva" and causal else {}
        if direction in mechanism.directions:
            module = registry.build(name, 16, 2, causal=causal, **options)
            assert module(torch.randn(2, 8, 16)).shape == (2, 8, 16)
        else:
            with pytest.raises(ValueError, match=f"{name} attention is .* only; {direction} choices: .*softmax"):
                registry.build(name, 16, 2, causal=causal)


@pytest.mark.parametrize("name", registry.choices())
def test_every_cost_is_positive_and_only_softmax_grows_linearly_per_token(name):
    mechanism = registry.get(name)
    options = {"num_chunks": 0, "chunk_size": 8} if name == "eva" else {}
    causal = registry.BIDIRECTIONAL not in mechanism.directions
    small, large = (mechanism.macs_per_token(N, 768, 12, causal=causal, **options) for N in (2048, 8192))
    assert small > 0
    assert (large == 4 * small) if name == "softmax" else (large < 4 * small)


def test_an_unknown_option_is_named():
    with pytest.raises(ValueError, match="local has no option num_features"):
        registry.build("local", 16, 2, num_features=4)


def test_softmax_equals_its_float64_reference_with_padding():
    module = checks.build("softmax", causal=True, train=False)
    x = torch.randn(2, 7, checks.EMBED, dtype=torch.float64)
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[1, 5:] = True
    q, k, v = module.project(x)
    expected = module.out_proj(softmax_module.reference(q, k, v, causal=True, real=~mask).transpose(1, 2).reshape(2, 7, -1))
    torch.testing.assert_close(module(x, mask)[0], expected[0])
    torch.testing.assert_close(module(x, mask)[1, :5], expected[1, :5])


@pytest.mark.parametrize("name,options", [("softmax", {}), ("local", {"window_size": 4})])
def test_the_shared_checks_hold_for_softmax_and_local(name, options):
    for causal in (False, True):
        checks.check_padding(name, causal=causal, **options)
        checks.check_gradients(name, causal=causal, **options)
    checks.check_no_future(name, **options)
    checks.check_incremental(name, **options)
