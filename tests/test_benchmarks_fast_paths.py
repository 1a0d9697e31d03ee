"""The fast path that the benchmarks time equals the general one: causal EVA on the fused CPU kernel with
parts joined by their log-sum-exp (fairseq_eva/attention/flash.py) against the grouped path that runs
everywhere (any device, dropout, a trainable RPE), outputs and gradients, in float64."""

import pytest
import torch

from fairseq_eva.attention import EVAAttention, flash

pytestmark = pytest.mark.skipif(not flash.available(torch.zeros(1)), reason="torch has no fused CPU attention kernel")


def outputs_and_gradients(module, x, fast, monkeypatch):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(flash, "available", lambda q: False)
        calls = []
        m.setattr(flash.CausalFlash, "apply", lambda *a, f=flash.CausalFlash.apply: calls.append(1) or f(*a))
        module.zero_grad()
        x = x.detach().requires_grad_()
        y = module(x)
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
    assert bool(calls) == fast  # the path under test really ran
    grads = {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}
    return y.detach(), x.grad, grads


@pytest.mark.parametrize("N", [48, 45, 8, 3])
@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("chunk", [0, 2, 8])
def test_causal_fast_path_equals_general_path(chunk, overlap, rpe, N, monkeypatch):
    torch.manual_seed(0)
    module = EVAAttention(16, 2, causal=True, window_size=8, chunk_size=chunk, overlap=overlap, use_rpe=rpe).double()
    with torch.no_grad():
        for p in module.parameters():  # away from the ~0 / ~1 inits, so that every term matters
            p.add_(0.3 * torch.randn_like(p))
    if rpe:  # a trainable RPE takes the general path; frozen, the fast one
        module.rpe.requires_grad_(False)
    module.eval()
    x = torch.randn(2, N, 16, dtype=torch.float64)
    fast = outputs_and_gradients(module, x, True, monkeypatch)
    general = outputs_and_gradients(module, x, False, monkeypatch)
    torch.testing.assert_close(fast[0], general[0], atol=1e-10, rtol=0)
    torch.testing.assert_close(fast[1], general[1], atol=1e-10, rtol=0)
    assert fast[2].keys() == general[2].keys()
    for name in fast[2]:
        torch.testing.assert_close(fast[2][name], general[2][name], atol=1e-10, rtol=0, msg=name)


def test_trainable_rpe_and_dropout_take_the_general_path(monkeypatch):
    module = EVAAttention(16, 2, causal=True, window_size=8, chunk_size=2, use_rpe=True, dropout=0.1)
    x = torch.randn(1, 20, 16)
    calls = []
    monkeypatch.setattr(flash.CausalFlash, "apply", lambda *a, f=flash.CausalFlash.apply: calls.append(1) or f(*a))
    module.train()(x)  # dropout
    module.eval()(x)  # trainable RPE
    assert not calls
    with torch.no_grad():
        module(x)
    assert calls
