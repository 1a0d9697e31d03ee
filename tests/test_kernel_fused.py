"""The CUDA form of the "fused" kernel on the CPU: the bidirectional call over blocks and the causal parts
joined by log-sum-exp, with a trainable RPE and attention dropout, and the causal chunk part grouped under a
staircase mask, run here through `ReferenceOps`, which keeps the memory-efficient CUDA kernel's contract (out
and log-sum-exp forward; a backward that takes the joint out and log-sum-exp, replays the dropout mask from a
saved state, and returns the bias gradient) in plain PyTorch, passed to the fused kernel as its `ops`. The CUDA
kernel itself runs in the GPU check (benchmarks/gpu_check/) and in the CUDA-marked test below.
"""

import pytest
import torch
from eva_helpers import F64, LAYOUTS, contract_inputs, inputs, make

from fairseq_eva.attention.kernels import KERNELS, choose
from fairseq_eva.attention.kernels.fused import bidirectional, causal, ops
from fairseq_eva.attention.layout import BlockLayout

pytestmark = pytest.mark.usefixtures("one_thread")


class ReferenceOps(ops.CUDAOps):
    """CUDAOps' contract in PyTorch; group_logits small, so that chunk parts span several blocks."""

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


def cuda_form(**call):
    """The fused kernel of the call's layout, run by ReferenceOps."""
    return (causal if call["layout"].causal else bidirectional).attention(**call, ops=ReferenceOps)


def outputs_and_gradients(run, call, wrt):
    y, lse = run(**call)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    return [y, lse, *torch.autograd.grad((y * weights).sum(), [call[name] for name in wrt])]


@pytest.mark.parametrize("bias", ["offsets", "places"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_cuda_form_equals_the_reference_kernel(layout, padded, bias):
    """No dropout: y, lse and the gradients of q, k, v, the summaries and the RPE (a table by offset, or a
    per-place grid) equal the reference kernel's in float64; causal with chunk parts of several blocks under the
    staircase mask. (Causal takes no lengths: pads come after every real query.)"""
    if padded and layout.causal:
        pytest.skip("the fused causal kernel takes no lengths")
    call = contract_inputs(layout, padded, F64, grid=bias == "places")
    wrt = ["q", "k", "v", "k_summary", "beta", "rpe"]
    fused = outputs_and_gradients(cuda_form, call, wrt)
    reference = outputs_and_gradients(KERNELS["reference"].run, call, wrt)
    seen = torch.isfinite(reference[1])
    fused[1], reference[1] = fused[1][seen], reference[1][seen]
    for name, a, b in zip(["y", "lse", *wrt], fused, reference):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0, msg=lambda m: f"{name}: {m}")
    assert fused[-1].abs().sum() > 0  # the RPE table got its gradient
    if layout.causal:
        nb, C = 24 // layout.window, call["k_summary"].size(2)
        groups = list(causal._chunk_groups(layout, nb, C, ReferenceOps.group_logits))
        assert any(b1 - b0 > 1 for b0, b1, _ in groups)  # the staircase mask was exercised


@pytest.mark.parametrize("layout", [LAYOUTS["bidirectional, overlap"], LAYOUTS["causal, overlap"]],
                         ids=["bidirectional", "causal"])
@pytest.mark.slow
def test_the_cuda_form_takes_dropout_and_passes_gradcheck(layout):
    """Attention dropout on the joint probabilities: each call's mask replayed in its backward (gradcheck with
    the same masks in every call), and the mean over many masks is the output without dropout."""
    call = contract_inputs(layout, False, F64, B=1, N=16, d=3)
    names = ["q", "k", "v", "k_summary", "beta", "rpe"]

    def attention(dropout, seed=0):
        def run(*tensors):
            torch.manual_seed(seed)
            return cuda_form(**{**call, **dict(zip(names, tensors)), "dropout": dropout})[0]

        return run

    tensors = [call[name] for name in names]
    assert torch.autograd.gradcheck(attention(0.3), tensors)
    with torch.no_grad():
        plain = attention(0.0)(*tensors)
        mean = torch.stack([attention(0.3, seed)(*tensors) for seed in range(3000)]).mean(0)
        dropped = attention(0.3, 1)(*tensors)
    assert not torch.allclose(dropped, plain)
    assert (mean - plain).abs().max() < 0.1 * plain.abs().max()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("options", [dict(window_size=4, num_chunks=3, overlap=True),
                                     dict(causal=True, window_size=4, chunk_size=2),
                                     dict(causal=True, window_size=6, chunk_size=3, overlap=True)], ids=str)
def test_the_cuda_kernel_equals_the_blockwise_kernel_on_cuda(options, monkeypatch):
    """The real CUDA kernel, float32, training with a trainable RPE: the same outputs and gradients with
    kernel="fused" as with kernel="blockwise" on CUDA."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: torch.zeros_like(t))
    torch.backends.cuda.matmul.allow_tf32 = False
    x = inputs(2, 45, dtype=torch.float32).cuda().requires_grad_()

    def run(kernel):
        mod = make(train=True, use_rpe=True, dtype=torch.float32, kernel=kernel, **options).cuda()
        y = mod(x)
        return [y, *torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)).sum(),
                                        [x, *mod.parameters()])]

    for a, b in zip(run("fused"), run("blockwise")):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_on_cuda_takes_the_fused_kernels_for_training():
    q = torch.randn(1, 2, 8, 8, device="cuda")
    assert choose("auto", q, needs_grad=True, dropout=0.1, bias_grad=True).name == "fused"


def test_the_fused_kernel_trains_on_cuda_only():
    """Its spec takes dropout and a bias gradient, and its check refuses them on the CPU only (the CUDA ops
    train the bias and take dropout)."""
    spec, q = KERNELS["fused"], torch.randn(1, 2, 8, 8)
    assert spec.dropout and spec.bias_grad and ops.OPS["cuda"].trains_bias_and_dropout
    assert spec.refusal(q, needs_grad=True, dropout=0.0, bias_grad=False) is None
    assert "dropout" in spec.refusal(q, needs_grad=True, dropout=0.1, bias_grad=False)
    assert "gradient" in spec.refusal(q, needs_grad=True, dropout=0.0, bias_grad=True)


def test_cuda_bias_rows_are_aligned_to_16():
    q, k = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 21, 8)
    bias = torch.randn(1, 2, 5, 21, dtype=F64)
    aligned = ops.CUDAOps._bias(bias, q, k)
    assert aligned.shape == (3, 2, 5, 21) and aligned.dtype == q.dtype and aligned.stride(-2) % 16 == 0
    assert torch.equal(aligned, bias.float().expand(3, 2, 5, 21))


@pytest.mark.parametrize("overlap", [False, True])
def test_chunk_groups_cover_each_visible_summary_once(overlap):
    layout = BlockLayout.causal_blocks(8, overlap, 2)
    nb, total = 40, 160
    groups = list(causal._chunk_groups(layout, nb, total, 2000))
    blocks = [b for b0, b1, _ in groups for b in range(b0, b1)]
    assert blocks == [b for b in range(nb) if layout.visible_chunks(b, total) > 0]
    for b0, b1, K in groups:
        assert K == layout.visible_chunks(b1 - 1, total)
        assert b1 - b0 == 1 or (b1 - b0) * 8 * K <= 2000
        mask = causal._staircase(layout, b0, b1, K, F64, None)
        seen = [layout.visible_chunks(b, total) for b in range(b0, b1)]
        if mask is not None:
            assert [int((row == 0).sum()) for row in mask[:: 8]] == seen
    assert any(b1 - b0 > 1 for b0, b1, _ in groups)
