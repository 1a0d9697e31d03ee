"""What the EVA attention tests share: a layer with randomised parameters, inputs, pinned noise, and the
registered kernels to run a test on (each through the public option, EVAAttention(kernel=name))."""

import pytest
import torch

from fairseq_eva.attention import EVAAttention
from fairseq_eva.attention.kernels import KERNELS
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.relative_position import PlaceBias

F64 = torch.float64
TOL = dict(atol=1e-6, rtol=0)

# every registered kernel but the reference one (the per-query anchor, slow: tests/test_kernels.py checks each
# of these against it on the kernel contract) and, without a GPU, the Triton one: under Triton's interpreter
# it runs one program at a time, too slow for every layer test (tests/test_kernel_triton.py checks it, the
# layer's projections and parameters included)
INTERPRETED = {"triton"} if not torch.cuda.is_available() else set()
KERNEL_NAMES = [name for name in KERNELS if name != "reference" and name not in INTERPRETED]


def skip_unless_it_runs(mod):
    """Skips the test, saying why, where the layer's kernel cannot compute its call on this machine (its dtype,
    the dropout of its mode, its trainable RPE, a per-place one)."""
    if mod.kernel == "auto":
        return
    q = torch.empty(1, mod.num_heads, 1, mod.head_dim, dtype=mod.q_proj.weight.dtype, device=mod.q_proj.weight.device)
    dropout = mod.dropout.p if mod.training else 0.0
    reason = KERNELS[mod.kernel].refusal(q, needs_grad=True, dropout=dropout, bias_grad=mod.rpe is not None,
                                         bias_grid=isinstance(mod.rpe, PlaceBias))
    if reason is not None:
        pytest.skip(f"kernel {mod.kernel!r}: {reason}")


def make(embed=16, heads=2, seed=0, dtype=F64, train=False, **options):
    """An EVAAttention whose biases, LayerNorms and RPE are randomised (their inits are ~0 or ~1,
    which would hide a missing bias or a misplaced RPE); skips the test where its kernel cannot run."""
    torch.manual_seed(seed)
    options.setdefault("use_rpe", False)
    mod = EVAAttention(embed, heads, **options)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if name.startswith("rpe."):
                p.normal_(0.0, 1.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif p.dim() == 1:  # LayerNorm weights
                p.normal_(1.0, 0.3)
    mod = mod.to(dtype).train(train)
    skip_unless_it_runs(mod)
    return mod


def inputs(B, N, embed=16, seed=1, dtype=F64, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, embed, generator=g, dtype=dtype).requires_grad_(requires_grad)


def fixed_noise(shape_h_c_d):
    """A deterministic stand-in for eps ~ N(0, I): eps[h, c, i] depends on head, chunk and feature."""
    H, C, d = shape_h_c_d
    h = torch.arange(H, dtype=F64)[:, None, None]
    c = torch.arange(C, dtype=F64)[None, :, None]
    i = torch.arange(d, dtype=F64)[None, None, :]
    return torch.sin(1.0 + 0.7 * h + 1.3 * c + 0.37 * i)


LAYOUTS = {
    "bidirectional": BlockLayout.bidirectional(4, False),
    "bidirectional, overlap": BlockLayout.bidirectional(4, True),
    "causal": BlockLayout.causal_blocks(4, False, 2),
    "causal, overlap": BlockLayout.causal_blocks(4, True, 2),
}


def contract_inputs(layout, padded, dtype, B=3, H=2, N=24, d=4, grid=False):
    """Random inputs of the contract (q, k, v as views of token-major memory, as the layer passes them);
    padded: row 1 has 17 real tokens and every other summary hidden, row 2 no real token and no summary;
    grid: the bias as a random per-place grid (H x w x width) instead of a table by offset."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):  # drawn in float64, then rounded: the same inputs in every dtype
        return torch.randn(*shape, generator=g, dtype=F64).to(dtype)

    q, k, v = (randn(B, N, H, d).transpose(1, 2).requires_grad_() for _ in range(3))
    C = layout.visible_chunks(N // layout.window - 1, N // 2) if layout.causal else 3
    k_summary, beta = (randn(B, H, C, d).requires_grad_() for _ in range(2))
    rpe = (randn(H, layout.window, layout.width) if grid else randn(H, layout.num_offsets)).requires_grad_()
    lengths = chunk_ok = None
    if padded:
        lengths = torch.tensor([N, N - 7, 0])
        chunk_ok = torch.ones(B, C, dtype=torch.bool)
        chunk_ok[1, 1::2] = False
        chunk_ok[2] = False
    return dict(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=chunk_ok, rpe=rpe, lengths=lengths,
                dropout=0.0, seed=0, scale=d**-0.5)
