"""The CUDA form of causal_fused.py on the CPU: its parts joined by log-sum-exp with a trainable RPE and
attention dropout, and its chunk part grouped under a staircase mask, run here through `ReferenceKernel`,
which keeps the memory-efficient CUDA kernel's contract (out and log-sum-exp forward; a backward that takes
the joint out and log-sum-exp, replays the dropout mask from a saved state, and returns the bias gradient)
in plain PyTorch. The CUDA kernel itself runs in the GPU check (benchmarks/gpu_check.py).
"""

import pytest
import torch
from test_attention import F64, inputs, make

from fairseq_eva.attention import causal_fused, eva
from fairseq_eva.attention.layout import BlockLayout

pytestmark = pytest.mark.usefixtures("one_thread")


class ReferenceKernel(causal_fused.CUDAKernel):
    """CUDAKernel's contract in PyTorch; group_logits small, so that chunk parts span several blocks."""

    group_logits = 96

    @classmethod
    def available(cls, q):
        return True

    @staticmethod
    def _mask(shape, dropout, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.rand(shape, generator=g, dtype=F64) >= dropout).to(F64) / (1 - dropout)

    @classmethod
    def forward(cls, q, k, v, bias, causal, dropout, scale):
        assert not causal  # the CUDA kernel gets the causal mask as a bias
        S = q @ k.transpose(-1, -2) * scale + cls._bias(bias, q, k)
        lse = S.logsumexp(-1)
        seed = int(torch.randint(2**31, (1,)))
        P = (S - lse[..., None]).exp() * cls._mask(S.shape, dropout, seed)
        return P @ v, lse, seed

    @classmethod
    def backward(cls, grad, q, k, v, bias, out, lse, seed, causal, dropout, scale, bias_grad):
        S = q @ k.transpose(-1, -2) * scale + cls._bias(bias, q, k)
        P = (S - lse[..., None]).exp()
        Z = cls._mask(S.shape, dropout, seed)
        dP = (grad @ v.transpose(-1, -2)) * Z
        dS = P * (dP - (grad * out).sum(-1, keepdim=True))
        return dS @ k * scale, dS.transpose(-1, -2) @ q * scale, (P * Z).transpose(-1, -2) @ grad, dS if bias_grad else None


@pytest.fixture
def reference_kernel(monkeypatch):
    monkeypatch.setitem(causal_fused.KERNELS, "cpu", ReferenceKernel)


CASES = [
    dict(causal=True, window_size=4, chunk_size=2),
    dict(causal=True, window_size=4, chunk_size=2, overlap=True),
    dict(causal=True, window_size=6, chunk_size=3, overlap=True),
]


def outputs_and_gradients(mod, x):
    y = mod(x)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y)
    return y, torch.autograd.grad((y * weights).sum(), [x, *mod.parameters()])


@pytest.mark.parametrize("options", CASES, ids=str)
def test_the_cuda_form_equals_the_blockwise_kernel(options, reference_kernel, monkeypatch):
    """Training, trainable RPE, no dropout: the output and every gradient (the RPE table's too) equal the
    blockwise kernel's, in float64, with chunk parts of several blocks under the staircase mask."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: torch.zeros_like(t))  # omega's noise pinned
    mod = make(train=True, use_rpe=True, **options)
    x = inputs(2, 45, requires_grad=True)
    fused = outputs_and_gradients(mod, x)
    mod.kernel = "blockwise"
    blockwise = outputs_and_gradients(mod, x)
    torch.testing.assert_close(fused[0], blockwise[0], atol=1e-10, rtol=0)
    for (name, _), a, b in zip([("input", x), *mod.named_parameters()], fused[1], blockwise[1]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=lambda m: f"{name}: {m}")
    assert fused[1][-1].abs().sum() > 0  # the RPE table got its gradient
    layout = BlockLayout.causal_blocks(mod.window_size, mod.overlap, mod.chunk_size)
    nb = 45 // mod.window_size + 1
    groups = list(causal_fused._chunk_groups(layout, nb, nb * mod.window_size // mod.chunk_size, ReferenceKernel.group_logits))
    assert any(b1 - b0 > 1 for b0, b1, _ in groups)  # the staircase mask was exercised


@pytest.mark.parametrize("options", CASES[:2], ids=str)
def test_the_cuda_form_without_rpe_builds_the_causal_mask_itself(options, reference_kernel, monkeypatch):
    """No RPE: the CUDA form gives its own part the causal mask as a bias (the kernel gets no is_causal),
    and the output and gradients equal the blockwise kernel's."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: torch.zeros_like(t))
    mod = make(train=True, use_rpe=False, **options)
    x = inputs(2, 45, requires_grad=True)
    fused = outputs_and_gradients(mod, x)
    mod.kernel = "blockwise"
    blockwise = outputs_and_gradients(mod, x)
    for a, b in zip([fused[0], *fused[1]], [blockwise[0], *blockwise[1]]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def test_the_cuda_form_takes_dropout_and_passes_gradcheck(reference_kernel):
    """Attention dropout on the joint probabilities: each part's mask replayed in its backward (gradcheck
    with the same masks in every call), and the mean over many masks is the output without dropout."""
    layout = BlockLayout.causal_blocks(4, True, 2)
    B, H, N, d = 1, 2, 16, 3
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, generator=g, dtype=F64, requires_grad=True) for _ in range(3))
    k_summary, beta = (torch.randn(B, H, N // 2, d, generator=g, dtype=F64, requires_grad=True) for _ in range(2))
    own = torch.randn(1, H, 4, 4, generator=g, dtype=F64).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), -1e30)
    own.requires_grad_()
    prev = torch.randn(1, H, 4, 4, generator=g, dtype=F64, requires_grad=True)

    def attention(dropout, seed=0):
        def run(*t):
            torch.manual_seed(seed)
            return causal_fused.causal_attention(*t, layout, 0.5, dropout)

        return run

    inputs_ = (q, k, v, k_summary, beta, own, prev)
    assert torch.autograd.gradcheck(attention(0.3), inputs_)
    with torch.no_grad():
        plain = attention(0.0)(*inputs_)
        mean = torch.stack([attention(0.3, seed)(*inputs_) for seed in range(3000)]).mean(0)
        dropped = attention(0.3, 1)(*inputs_)
    assert not torch.allclose(dropped, plain)
    assert (mean - plain).abs().max() < 0.1 * plain.abs().max()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("options", CASES, ids=str)
def test_the_cuda_kernel_equals_the_blockwise_kernel_on_cuda(options, monkeypatch):
    """The real CUDA kernel, float32: the same outputs and gradients as the blockwise kernel on CUDA."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: torch.zeros_like(t))
    torch.backends.cuda.matmul.allow_tf32 = False
    mod = make(train=True, use_rpe=True, dtype=torch.float32, **options).cuda()
    x = inputs(2, 45, dtype=torch.float32).cuda().requires_grad_()
    fused = outputs_and_gradients(mod, x)
    mod.kernel = "blockwise"
    blockwise = outputs_and_gradients(mod, x)
    for a, b in zip([fused[0], *fused[1]], [blockwise[0], *blockwise[1]]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_the_cpu_kernel_is_chosen_on_the_cpu_and_refuses_training_settings():
    q = torch.randn(1, 2, 8, 4)
    assert causal_fused.kernel_for(q) is causal_fused.CPUKernel
    assert causal_fused.accepts(q, False, 0.0) and not causal_fused.accepts(q, True, 0.0)
    assert not causal_fused.accepts(q, False, 0.1)


def test_cuda_bias_rows_are_aligned_to_16():
    q, k = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 21, 8)
    bias = torch.randn(1, 2, 5, 21, dtype=F64)
    aligned = causal_fused.CUDAKernel._bias(bias, q, k)
    assert aligned.shape == (3, 2, 5, 21) and aligned.dtype == q.dtype and aligned.stride(-2) % 16 == 0
    assert torch.equal(aligned, bias.float().expand(3, 2, 5, 21))


@pytest.mark.parametrize("overlap", [False, True])
def test_chunk_groups_cover_each_visible_summary_once(overlap):
    layout = BlockLayout.causal_blocks(8, overlap, 2)
    nb, total = 40, 160
    groups = list(causal_fused._chunk_groups(layout, nb, total, 2000))
    blocks = [b for b0, b1, _ in groups for b in range(b0, b1)]
    assert blocks == [b for b in range(nb) if layout.visible_chunks(b, total) > 0]
    for b0, b1, K in groups:
        assert K == layout.visible_chunks(b1 - 1, total)
        assert b1 - b0 == 1 or (b1 - b0) * 8 * K <= 2000
        mask = causal_fused._staircase(layout, b0, b1, K, F64, None)
        seen = [layout.visible_chunks(b, total) for b in range(b0, b1)]
        if mask is not None:
            assert [int((row == 0).sum()) for row in mask[:: 8]] == seen
    assert any(b1 - b0 > 1 for b0, b1, _ in groups)


def test_the_kernel_choice_on_cuda_takes_the_training_settings(monkeypatch):
    """On CUDA the fused kernels are the training path, bidirectional and causal (decided here without a
    GPU: the device check is the only CUDA-specific input)."""
    q = torch.randn(1, 2, 8, 8)
    monkeypatch.setitem(causal_fused.KERNELS, "cpu", ReferenceKernel)
    monkeypatch.setattr(eva.cpu_kernel, "applies", lambda q: False)  # a CUDA tensor never runs the CPU kernel
    assert causal_fused.accepts(q, True, 0.1)
    for causal in (False, True):
        mod = eva.EVAAttention(16, 2, causal=causal, window_size=4, chunk_size=2, dropout=0.1).train()
        grid = torch.zeros(2, 4, 4, requires_grad=True)
        assert mod._use_blockwise(q, grid) == (not causal)  # bidirectional: CPU tensors stay blockwise
