"""The "c_loop" kernel (kernels/c_loop/: the blockwise kernel as one compiled C loop) equals the "blockwise"
kernel (groups of torch products and PyTorch passes) in float32, dropout masks and all, on every layout and
at two threads; and a float32 layer on it equals the per-query definition in float64 (docs/design.md,
"Kernels"). Both kernels are chosen through the public option, EVAAttention(kernel=...) or the registry."""

import copy

import pytest
import torch
from eva_helpers import fixed_noise, inputs, make

from fairseq_eva.attention import EVAAttention
from fairseq_eva.attention.kernels import KERNELS, softmax_dropout
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.reference import reference_eva

LAYOUTS = {
    "bidirectional": BlockLayout.bidirectional(8, False),
    "bidirectional, overlap": BlockLayout.bidirectional(8, True),
    "causal": BlockLayout.causal_blocks(8, False, 2),
    "causal, overlap": BlockLayout.causal_blocks(8, True, 4),
}


@pytest.fixture
def c_loop():
    """Skips where the C loop did not build, with the reason."""
    reason = KERNELS["c_loop"].unavailable()
    if reason is not None:
        pytest.skip(f"the C loop: {reason}")


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def attention_and_gradients(kernel, layout, dropout, padded, B=2, H=3, N=40, d=8):
    """Y and the gradients of q, k, v, the summaries and the RPE table, float32, by the registered kernel; the
    second row padded, and (bidirectional) some summaries hidden."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, H, d).transpose(1, 2).requires_grad_() for _ in range(3))
    C = N // 2 if layout.causal else 5
    k_summary, beta = (torch.randn(B, H, C, d, requires_grad=True) for _ in range(2))
    rpe = torch.randn(H, layout.num_offsets, requires_grad=True)
    lengths = torch.tensor([N, N - 13 if padded else N])
    chunk_ok = torch.tensor([[True] * C, [True, False] * (C // 2) + [True] * (C % 2)]) if padded and not layout.causal else None
    y, lse = KERNELS[kernel].run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=chunk_ok, rpe=rpe,
                                 lengths=lengths, dropout=dropout, seed=11, scale=d**-0.5)
    grads = torch.autograd.grad(y, [q, k, v, k_summary, beta, rpe], torch.randn_like(y))
    return [y, lse, *grads]


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_the_c_loop_equals_the_blockwise_kernel(layout, dropout, padded, c_loop, two_threads):
    """Two threads: the same outputs, log-sum-exps and gradients as the groups; with dropout the same weights
    dropped (a different mask moves Y by far more than the tolerance)."""
    compiled = attention_and_gradients("c_loop", layout, dropout, padded)
    groups = attention_and_gradients("blockwise", layout, dropout, padded)
    for name, c, t in zip(["y", "lse", "dq", "dk", "dv", "d_summary", "d_beta", "d_rpe"], compiled, groups):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    if dropout:
        assert (attention_and_gradients("c_loop", layout, 0.0, padded)[0] - compiled[0]).abs().max() > 0.1


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3, overlap=True), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
def test_the_c_loop_matches_the_definition(options, c_loop, monkeypatch):
    """A float32 layer in training with a trainable RPE, on the C loop: its output and the gradients of the
    input and of every parameter equal autograd through the per-query definition in float64, to float32
    rounding."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    reference = make(train=True, use_rpe=True, **options)  # float64
    layer = copy.deepcopy(reference).float()
    layer.kernel = "c_loop"
    x = inputs(2, 21, requires_grad=True)
    weights = torch.randn(2, 21, 16, dtype=torch.float64)
    y = layer(x.float())
    grads = torch.autograd.grad((y * weights.float()).sum(), [x, *layer.parameters()])
    noise = lambda c: fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
    expected = torch.stack([reference_eva(reference, row, noise=noise) for row in x])
    expected_grads = torch.autograd.grad((expected * weights).sum(), [x, *reference.parameters()])
    torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-4)
    for (name, _), g, e in zip([("input", x), *reference.named_parameters()], grads, expected_grads):
        torch.testing.assert_close(g.double(), e, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_softmax_rows_sum_to_one_and_masked_keys_get_nothing():
    torch.manual_seed(0)
    S, bias = torch.randn(2, 3, 2, 4, 9) * 3, torch.randn(3, 4, 5)
    low = torch.finfo(torch.float32).min
    S[0, 1, 0, 2, 1] = low
    bias[:, 0, 3:] = low
    rows = torch.arange(2 * 3 * 2 * 4).view(2, 3, 2, 4)
    P, _ = softmax_dropout.forward(S.clone(), bias, None, 0.0, 0, rows)
    torch.testing.assert_close(P.sum(-1), torch.ones(P.shape[:-1]))
    assert P[0, 1, 0, 2, 1] == 0 and (P[:, :, :, 0, 3:5] == 0).all()
    expected = torch.softmax(torch.cat([S[..., :5] + bias[None, :, None], S[..., 5:]], -1), -1)
    torch.testing.assert_close(P, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
def test_the_layer_trains_alike_on_both_kernels(options, c_loop):
    """An EVA layer in training, float32, trainable RPE and dropout, padded: outputs and every gradient the
    same with kernel="c_loop" and kernel="blockwise"."""
    x = torch.randn(2, 21, 16, requires_grad=True)
    pad = torch.zeros(2, 21, dtype=torch.bool)
    pad[1, 17:] = True

    def run(kernel):
        torch.manual_seed(0)
        mod = EVAAttention(16, 2, use_rpe=True, dropout=0.2, kernel=kernel, **options).train()
        torch.manual_seed(1)
        y = mod(x, key_padding_mask=None if mod.causal else pad)
        return [y, *torch.autograd.grad(y.square().sum(), [x, *mod.parameters()])]

    for c, t in zip(run("c_loop"), run("blockwise")):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4)
