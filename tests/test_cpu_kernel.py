"""The blockwise kernel on the CPU: the compiled C loop (cpu_kernel.py) equals the groups of torch products
and PyTorch passes (blockwise.py, softmax_dropout.py) in float32, dropout masks and all, on every layout
and thread count; it builds wherever a C compiler is (docs/design.md, "Kernels"). The groups are what
the float64 tests check against the definition."""

import copy
import shutil

import pytest
import torch
from test_attention import _fixed_noise, inputs, make, reference_eva

from fairseq_eva.attention import EVAAttention, blockwise, cpu_kernel, softmax_dropout
from fairseq_eva.attention.blockwise import blockwise_attention
from fairseq_eva.attention.layout import BlockLayout

LAYOUTS = {
    "bidirectional": BlockLayout.bidirectional(8, False),
    "bidirectional, overlap": BlockLayout.bidirectional(8, True),
    "causal": BlockLayout.causal_blocks(8, False, 2),
    "causal, overlap": BlockLayout.causal_blocks(8, True, 4),
}


@pytest.fixture
def groups(monkeypatch):
    """Runs the groups instead of the C loop while set."""

    def use(on):
        monkeypatch.setattr(cpu_kernel, "_library", False if on else None)

    return use


def test_the_kernel_builds_where_a_compiler_is():
    if shutil.which("cc") is None:
        pytest.skip("no C compiler: the groups run")
    assert cpu_kernel.library() is not None


def attention_and_gradients(layout, dropout, padded, B=2, H=3, N=40, d=8):
    """Y and the gradients of q, k, v, the summaries and the bias table, float32; the second row padded,
    and (bidirectional) some summaries empty."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, N, H, d).transpose(1, 2).requires_grad_() for _ in range(3))
    C = N // 2 if layout.causal else 5
    k_summary, beta = (torch.randn(B, H, C, d, requires_grad=True) for _ in range(2))
    grid = torch.randn(H, layout.window, layout.width, requires_grad=True)
    lengths = torch.tensor([N, N - 13 if padded else N])
    chunk_ok = torch.tensor([[True] * C, [True, False] * (C // 2) + [True] * (C % 2)]) if padded and not layout.causal else None
    y = blockwise_attention(q, k, v, k_summary, beta, grid, lengths, chunk_ok, layout, dropout, seed=11)
    grads = torch.autograd.grad(y, [q, k, v, k_summary, beta, grid], torch.randn_like(y))
    return [y, *grads]


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_the_c_loop_equals_the_groups(layout, dropout, padded, groups, monkeypatch):
    """Two threads: the same outputs and gradients as the groups of one block each; with dropout the same
    weights dropped (a different mask moves Y by far more than the tolerance)."""
    if cpu_kernel.library() is None:
        pytest.skip("the C loop did not build")
    monkeypatch.setitem(blockwise.GROUP_ELEMENTS, "cpu", 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    compiled = attention_and_gradients(layout, dropout, padded)
    groups(True)
    reference = attention_and_gradients(layout, dropout, padded)
    for name, c, t in zip(["y", "dq", "dk", "dv", "d_summary", "d_beta", "d_bias"], compiled, reference):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    if dropout:
        groups(False)
        assert (attention_and_gradients(layout, 0.0, padded)[0] - compiled[0]).abs().max() > 0.1


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3, overlap=True), dict(causal=True, window_size=4, chunk_size=2, overlap=True)],
    ids=["bidirectional", "causal"],
)
def test_the_c_loop_matches_the_definition(options, monkeypatch):
    """A float32 layer in training with a trainable RPE, on the C loop: its output and the gradients of the
    input and of every parameter equal autograd through the per-query definition in float64, to float32
    rounding."""
    if cpu_kernel.library() is None:
        pytest.skip("the C loop did not build")
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: _fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    calls = []
    original = cpu_kernel.backward
    monkeypatch.setattr(cpu_kernel, "backward", lambda *a: calls.append(1) or original(*a))
    reference = make(train=True, use_rpe=True, **options)  # float64
    layer = copy.deepcopy(reference).float()
    x = inputs(2, 21, requires_grad=True)
    weights = torch.randn(2, 21, 16, dtype=torch.float64)
    y = layer(x.float())
    grads = torch.autograd.grad((y * weights.float()).sum(), [x, *layer.parameters()])
    assert calls, "float32 training runs the C loop"
    noise = lambda c: _fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
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
def test_the_layer_trains_alike_on_both_implementations(options, groups):
    """An EVA layer in training, float32, trainable RPE and dropout, padded: outputs and every gradient the
    same with the C loop and with the groups."""
    if cpu_kernel.library() is None:
        pytest.skip("the C loop did not build")
    torch.manual_seed(0)
    mod = EVAAttention(16, 2, use_rpe=True, dropout=0.2, **options).train()
    x = torch.randn(2, 21, 16, requires_grad=True)
    pad = torch.zeros(2, 21, dtype=torch.bool)
    pad[1, 17:] = True

    def run():
        torch.manual_seed(1)
        y = mod(x, key_padding_mask=None if mod.causal else pad)
        return [y, *torch.autograd.grad(y.square().sum(), [x, *mod.parameters()])]

    compiled = run()
    groups(True)
    reference = run()
    for c, t in zip(compiled, reference):
        torch.testing.assert_close(c, t, atol=2e-5, rtol=1e-4)
