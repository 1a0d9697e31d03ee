"""The training path of EVA: a trainable relative position bias and attention dropout (the architectures'
defaults and the paper's configs) on the blockwise kernel (docs/design.md, "Kernels").

Gradients of every parameter against autograd through the per-query definition, in float64; dropout as
fairseq means it (on the attention probabilities, local and chunk weights alike, the same mask in the
forward and the backward), checked statistically, by gradcheck and for reproducibility; which kernel runs.
"""

import pytest
import torch
from test_attention import F64, TOL, _fixed_noise, inputs, make, reference_eva

from fairseq_eva.attention import EVAAttention, causal_fused, cpu_kernel, eva, softmax_dropout
from fairseq_eva.attention.blockwise import blockwise_attention
from fairseq_eva.attention.layout import BlockLayout

CASES = [
    dict(window_size=4, num_chunks=3),
    dict(window_size=4, num_chunks=3, overlap=True),
    dict(window_size=6, chunk_size=4, overlap=True),
    dict(causal=True, window_size=4, chunk_size=2),
    dict(causal=True, window_size=4, chunk_size=2, overlap=True),
    dict(causal=True, window_size=6, chunk_size=3, overlap=True),
]


pytestmark = pytest.mark.usefixtures("one_thread")


def spy_blockwise(monkeypatch):
    """Records the calls of the blockwise kernel."""
    calls = []
    original = eva.blockwise_attention
    monkeypatch.setattr(eva, "blockwise_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("options", CASES, ids=str)
def test_training_gradients_match_the_definition(options, monkeypatch):
    """Training mode, trainable RPE, sampled omega (noise pinned): the output and the gradients of the input
    and of every parameter (projections, proposal, RPE table) equal autograd through reference_eva."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: _fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    calls = spy_blockwise(monkeypatch)
    mod = make(train=True, use_rpe=True, **options)
    x = inputs(2, 21, requires_grad=True)
    weights = torch.randn(2, 21, 16, dtype=F64)
    got = mod(x)
    assert calls, "a trainable RPE in training takes the blockwise kernel"
    grads = torch.autograd.grad((got * weights).sum(), [x, *mod.parameters()])
    noise = lambda c: _fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
    expected = torch.stack([reference_eva(mod, row, noise=noise) for row in x])
    expected_grads = torch.autograd.grad((expected * weights).sum(), [x, *mod.parameters()])
    torch.testing.assert_close(got, expected, **TOL)
    for (name, _), g, e in zip([("input", x), *mod.named_parameters()], grads, expected_grads):
        torch.testing.assert_close(g, e, **TOL, msg=lambda m: f"{name}: {m}")
    assert grads[-1].abs().sum() > 0 if mod.rpe is not None else True


def test_dropout_mask_has_rate_p_and_mean_one():
    def cpu_draws(seed):  # 2048 query rows of 512 keys
        return softmax_dropout.draws(torch.arange(4 * 512).view(4, 512), 512, seed, torch.device("cpu"))

    draws = cpu_draws(3)
    assert draws.min() >= 0 and draws.max() < 2**16
    counts = torch.bincount(draws.flatten() >> 12, minlength=16).double()  # 16 bins of the 16-bit draws: uniform
    assert ((counts - counts.mean()).square() / counts.mean()).sum() < 50  # chi-square, 15 degrees of freedom
    keep = (draws >= softmax_dropout.threshold(0.1)).double()
    dropped = 1 - keep.mean().item()
    assert abs(dropped - 0.1) < 4 * (0.1 * 0.9 / keep.numel()) ** 0.5
    assert abs(keep.mean().item() * softmax_dropout.keep_scale(0.1) - 1) < 2e-3
    assert torch.equal(draws, cpu_draws(3))
    assert not torch.equal(draws, cpu_draws(4))
    # consecutive seeds give unrelated masks, not shifted copies of one another
    other = (cpu_draws(4) >= softmax_dropout.threshold(0.1)).double()
    for shift in range(4):
        both = keep.flatten()[shift:] * other.flatten()[: other.numel() - shift]
        assert abs(both.mean().item() - 0.81) < 4 * (0.81 * 0.19 / both.numel()) ** 0.5
    neighbours = keep.flatten()[:-1] * keep.flatten()[1:]  # independent elements: P(both kept) = 0.9^2
    assert abs(neighbours.mean().item() - (1 - dropped) ** 2) < 4 * (0.81 * 0.19 / neighbours.numel()) ** 0.5


@pytest.mark.parametrize("options", [CASES[1], CASES[4]], ids=str)
def test_dropout_output_is_unbiased(options, monkeypatch):
    """E[y] with dropout equals y without it (omega's noise set to 0, so dropout is the only randomness):
    the mean of 600 draws lies within 5 standard errors of the no-dropout output, element by element."""
    monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
    mod = make(train=True, use_rpe=True, dropout=0.3, **options)
    x = inputs(1, 13)
    with torch.no_grad():
        draws = torch.stack([mod(x) for _ in range(600)])
        mod.dropout.p = 0.0
        expected = mod(x)
    mean, sem = draws.mean(0), draws.std(0) / 600**0.5
    assert torch.all((mean - expected).abs() <= 5 * sem + 1e-12)
    assert sem.max() > 1e-3  # dropout did act


def test_dropout_reaches_the_chunk_weights():
    """Local values 0 and chunk values 1: y = sum over chunks of Z_c p_c, which varies only if the chunk
    weights are dropped too."""
    B, H, N, d, w = 1, 2, 16, 4, 4
    q, k = torch.randn(B, H, N, d, dtype=F64), torch.randn(B, H, N, d, dtype=F64)
    v = torch.zeros(B, H, N, d, dtype=F64)
    k_summary, beta = torch.randn(B, H, 4, d, dtype=F64), torch.ones(B, H, 4, d, dtype=F64)
    args = (q, k, v, k_summary, beta, None, torch.full((B,), N), None, BlockLayout.bidirectional(w, False))
    exact = blockwise_attention(*args)[..., 0]
    dropped = torch.stack([blockwise_attention(*args, dropout=0.5, seed=s)[..., 0] for s in range(20)])
    assert (dropped - exact).abs().max() > 0.1


@pytest.mark.parametrize(
    "layout", [BlockLayout.bidirectional(4, True), BlockLayout.causal_blocks(4, True, 2)], ids=["bidirectional", "causal"]
)
def test_dropout_backward_uses_the_forward_mask(layout):
    """gradcheck with a fixed dropout seed: the analytic gradients (q, k, v, summaries, bias) are those of
    the function the forward computed, so the backward redraws the forward's mask."""
    B, H, N, d = 1, 2, 12, 3
    torch.manual_seed(0)
    tensors = [torch.randn(B, H, N, d, dtype=F64, requires_grad=True) for _ in range(3)]
    tensors += [torch.randn(B, H, 6 if layout.causal else 3, d, dtype=F64, requires_grad=True) for _ in range(2)]
    tensors.append(torch.randn(H, 4, layout.width, dtype=F64, requires_grad=True))
    lengths = torch.tensor([N - 1])

    def f(q, k, v, k_summary, beta, grid):
        return blockwise_attention(q, k, v, k_summary, beta, grid, lengths, None, layout, dropout=0.3, seed=7)

    assert torch.autograd.gradcheck(f, tensors)


@pytest.mark.parametrize("options", [CASES[2], CASES[5]], ids=str)
def test_dropout_training_is_reproducible_under_a_seed(options):
    mod = make(train=True, use_rpe=True, dropout=0.1, **options)
    x = inputs(2, 21, requires_grad=True)

    def run(seed):
        torch.manual_seed(seed)
        y = mod(x)
        return y, torch.autograd.grad(y.square().sum(), [x, *mod.parameters()])

    (y1, g1), (y2, g2), (y3, _) = run(0), run(0), run(1)
    assert torch.equal(y1, y2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    assert not torch.equal(y1, y3)


@pytest.mark.parametrize("options", CASES, ids=str)
def test_fused_and_blockwise_kernels_agree(options, monkeypatch):
    """Evaluation with a frozen RPE runs the fused kernels; forcing the blockwise one changes neither the
    output nor any gradient (float64)."""
    mod = make(use_rpe=True, **options)
    mod.rpe.requires_grad_(False)
    x = inputs(2, 21, requires_grad=True)
    mask = torch.zeros(2, 21, dtype=torch.bool)
    if not mod.causal:
        mask[1, :5] = True  # left padding: per-row layouts

    def outputs_and_gradients():
        y = mod(x, key_padding_mask=None if mod.causal else mask)
        params = [p for p in mod.parameters() if p.requires_grad]
        return y, torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=F64).view_as(y)).sum(), [x, *params])

    calls = spy_blockwise(monkeypatch)
    fused = outputs_and_gradients()
    assert not calls
    mod.kernel = "blockwise"
    blockwise = outputs_and_gradients()
    assert calls
    torch.testing.assert_close(fused[0], blockwise[0], atol=1e-10, rtol=0)
    for a, b in zip(fused[1], blockwise[1]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_choice(causal, monkeypatch):
    """float32 on the CPU: the C loop, always (the fastest there). Elsewhere (float64 here), the fused kernels
    where they apply (evaluation, no gradient for the bias) and the blockwise kernel for dropout or a trainable
    RPE in training; forcing the fused kernel where it cannot run is an error that says why."""
    opts = dict(causal=True, window_size=8, chunk_size=2) if causal else dict(window_size=8, num_chunks=2)
    calls = spy_blockwise(monkeypatch)

    def runs_blockwise(mod, dtype=F64):
        calls.clear()
        mod.to(dtype)(torch.randn(1, 20, 16, dtype=dtype))
        return bool(calls)

    with_rpe = EVAAttention(16, 2, use_rpe=True, **opts)
    assert runs_blockwise(with_rpe.train()) and runs_blockwise(with_rpe.eval())  # the RPE needs its gradient
    with torch.no_grad():
        assert not runs_blockwise(with_rpe.train())
        assert runs_blockwise(with_rpe.train(), torch.float32) == (cpu_kernel.library() is not None)
    with_dropout = EVAAttention(16, 2, use_rpe=False, dropout=0.1, **opts)
    assert runs_blockwise(with_dropout.train()) and not runs_blockwise(with_dropout.eval())
    forced = EVAAttention(16, 2, use_rpe=False, dropout=0.1, kernel="fused", **opts).train()
    with pytest.raises(ValueError, match="kernel='fused' takes no attention dropout"):
        runs_blockwise(forced)


def test_cpu_fused_kernel_refuses_a_trainable_bias():
    q = torch.randn(1, 2, 8, 4)
    bias = torch.zeros(1, 2, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="the CPU kernel takes neither"):
        causal_fused.causal_attention(q, q, q, None, None, bias, None, BlockLayout.causal_blocks(4, False, 0), 0.5)


def test_unknown_kernel_is_named():
    with pytest.raises(ValueError, match="kernel must be one of auto, fused, blockwise"):
        EVAAttention(16, 2, kernel="flash")
