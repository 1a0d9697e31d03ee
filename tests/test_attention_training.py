"""The training path of EVA: a trainable relative position bias and attention dropout (the architectures'
defaults and the paper's configs) on the blockwise kernel (docs/design.md, "Kernels").

Gradients of every parameter against autograd through the per-query definition, in float64; dropout as
fairseq means it (on the attention probabilities, local and chunk weights alike, the same mask in the
forward and the backward), checked statistically, by gradcheck and for reproducibility; which kernel runs.
"""

import pytest
import torch
from eva_helpers import F64, KERNEL_NAMES, TOL, fixed_noise, inputs, make

from fairseq_eva.attention import EVAAttention
from fairseq_eva.attention.kernels import KERNELS, choose, softmax_dropout
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.reference import reference_eva

CASES = [
    dict(window_size=4, num_chunks=3),
    dict(window_size=4, num_chunks=3, overlap=True),
    dict(window_size=6, chunk_size=4, overlap=True),
    dict(causal=True, window_size=4, chunk_size=2),
    dict(causal=True, window_size=4, chunk_size=2, overlap=True),
    dict(causal=True, window_size=6, chunk_size=3, overlap=True),
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("options", CASES, ids=str)
def test_training_gradients_match_the_definition(options, kernel, monkeypatch):
    """Training mode, trainable RPE, sampled omega (noise pinned): the output and the gradients of the input
    and of every parameter (projections, proposal, RPE table) equal autograd through reference_eva, on each
    kernel that trains here."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    mod = make(train=True, use_rpe=True, kernel=kernel, **options)
    x = inputs(2, 21, requires_grad=True)
    weights = torch.randn(2, 21, 16, dtype=F64)
    got = mod(x)
    grads = torch.autograd.grad((got * weights).sum(), [x, *mod.parameters()])
    noise = lambda c: fixed_noise((2, c + 1, 8))[:, c]  # noqa: E731
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
    call = dict(layout=BlockLayout.bidirectional(w, False), q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=None,
                rpe=None, lengths=None, scale=d**-0.5)
    blockwise = KERNELS["blockwise"].run
    exact = blockwise(**call, dropout=0.0, seed=0)[0][..., 0]
    dropped = torch.stack([blockwise(**call, dropout=0.5, seed=s)[0][..., 0] for s in range(20)])
    assert (dropped - exact).abs().max() > 0.1


@pytest.mark.parametrize(
    "layout", [BlockLayout.bidirectional(4, True), BlockLayout.causal_blocks(4, True, 2)], ids=["bidirectional", "causal"]
)
def test_dropout_backward_uses_the_forward_mask(layout):
    """gradcheck with a fixed dropout seed: the analytic gradients (q, k, v, summaries, RPE table) are those of
    the function the forward computed, so the backward redraws the forward's mask."""
    B, H, N, d = 1, 2, 12, 3
    torch.manual_seed(0)
    tensors = [torch.randn(B, H, N, d, dtype=F64, requires_grad=True) for _ in range(3)]
    tensors += [torch.randn(B, H, 6 if layout.causal else 3, d, dtype=F64, requires_grad=True) for _ in range(2)]
    tensors.append(torch.randn(H, layout.num_offsets, dtype=F64, requires_grad=True))  # the RPE table
    lengths = torch.tensor([N - 1])

    def f(q, k, v, k_summary, beta, rpe):
        return KERNELS["blockwise"].run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=None, rpe=rpe,
                                        lengths=lengths, dropout=0.3, seed=7, scale=0.5)[0]

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
def test_fused_and_blockwise_kernels_agree(options):
    """Evaluation with a frozen RPE, which the fused kernels take on the CPU: the output and every gradient are
    the same on the fused and the blockwise kernel (float64)."""
    x = inputs(2, 21, requires_grad=True)
    mask = torch.zeros(2, 21, dtype=torch.bool)
    if not options.get("causal"):
        mask[1, :5] = True  # left padding: per-row layouts

    def outputs_and_gradients(kernel):
        mod = make(use_rpe=True, kernel=kernel, **options)
        mod.rpe.requires_grad_(False)
        y = mod(x, key_padding_mask=None if mod.causal else mask)
        params = [p for p in mod.parameters() if p.requires_grad]
        return y, torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=F64).view_as(y)).sum(), [x, *params])

    fused, blockwise = outputs_and_gradients("fused"), outputs_and_gradients("blockwise")
    torch.testing.assert_close(fused[0], blockwise[0], atol=1e-10, rtol=0)
    for a, b in zip(fused[1], blockwise[1]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def _auto(dtype, *, grad=True, dropout=0.0, bias_grad=False):
    """The kernel "auto" picks on the CPU for such a call."""
    return choose("auto", torch.empty(1, 2, 8, 8, dtype=dtype), needs_grad=grad, dropout=dropout, bias_grad=bias_grad).name


def test_kernel_choice():
    """float32 on the CPU: the C loop, always (the fastest there), where it builds. Elsewhere (float64,
    bfloat16), the fused kernels where they apply (no dropout, no gradient for the bias) and the blockwise
    kernel for dropout or a trainable RPE in training."""
    c_loop = KERNELS["c_loop"].unavailable() is None
    for call in (dict(), dict(dropout=0.1), dict(bias_grad=True), dict(grad=False)):
        takes_fused = not (call.get("dropout") or call.get("bias_grad"))
        assert _auto(torch.float32, **call) == ("c_loop" if c_loop else "fused" if takes_fused else "blockwise")
    for dtype in (F64, torch.bfloat16):
        assert _auto(dtype) == _auto(dtype, grad=False) == "fused"
        assert _auto(dtype, dropout=0.1) == _auto(dtype, bias_grad=True) == "blockwise"


@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_runs_the_kernel_it_is_given(causal):
    """The layer passes its call to the kernel `choose` gives: a trainable RPE in training is the blockwise
    kernel's in float64 (the layer equals the definition either way); forcing the fused kernel there is an
    error that says why."""
    opts = dict(causal=True, window_size=8, chunk_size=2) if causal else dict(window_size=8, num_chunks=2)
    x = torch.randn(1, 20, 16, dtype=F64)
    with_dropout = EVAAttention(16, 2, use_rpe=False, dropout=0.1, kernel="fused", **opts).to(F64)
    with_dropout.eval()(x)  # evaluation: no dropout, the fused kernel takes it
    with pytest.raises(ValueError, match="'fused' cannot run this call: torch's fused CPU kernel takes no attention dropout"):
        with_dropout.train()(x)
    with_rpe = EVAAttention(16, 2, use_rpe=True, kernel="fused", **opts).to(F64).eval()
    with pytest.raises(ValueError, match="gives no gradient to a trainable relative position bias"):
        with_rpe(x)
    with torch.no_grad():
        with_rpe(x)  # no gradient: the fused kernel takes it


def test_unknown_kernel_is_named():
    with pytest.raises(ValueError, match="kernel must be one of auto, blockwise, c_loop, fused, reference, triton; got 'flash'"):
        EVAAttention(16, 2, kernel="flash")
