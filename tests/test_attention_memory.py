"""EVA's memory is linear in N and nothing N x N is built (docs/design.md, "Complexity").

Peak memory is read from the CPU allocator through torch.profiler (profile_memory=True): every allocation
and free made during forward + backward is recorded with the allocator's running total, so the peak is
exact and deterministic (no RSS noise). A quadratic baseline (exact softmax) checks the method itself.
Tensor sizes are recorded with a TorchDispatchMode that sees the output of every op, backward included.
"""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.common import peak_memory
from fairseq_eva.attention import EVAAttention

EMBED, HEADS = 256, 4
RATIO = 2.3  # doubling N may at most multiply peak memory by this


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def peak_bytes(fn):
    """Peak of live CPU-allocator bytes while fn runs, above what was live before it started."""
    peak = peak_memory(fn, torch.device("cpu"))
    assert peak > 0, "the profiler recorded no allocations"
    return peak


def forward_backward(module, N, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(1, N, EMBED, requires_grad=True)

    def run():
        module(x).sum().backward()

    return run


class SoftmaxAttention(torch.nn.Module):
    """Exact multi-head softmax attention: the quadratic case the measurement must catch."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(EMBED, 3 * EMBED)
        self.out = torch.nn.Linear(EMBED, EMBED)

    def forward(self, x, key_padding_mask=None):
        B, N, _ = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), -1)
        return self.out((p @ v).transpose(1, 2).reshape(B, N, EMBED))


def growth(module, n_small, n_large):
    module.train()  # training: the memory that matters, with sampled omega
    small = peak_bytes(forward_backward(module, n_small))
    large = peak_bytes(forward_backward(module, n_large))
    return large / small, small, large


@pytest.mark.parametrize(
    "options",
    [
        dict(window_size=64, num_chunks=16),
        dict(window_size=64, num_chunks=16, overlap=True, use_rpe=True),
        # causal chunk logits are N x N/s by design (one softmax over all visible chunks); with s = w they
        # stay below the local part up to N = 8192, so the growth is near linear there
        dict(causal=True, window_size=128, chunk_size=128, use_rpe=True),
        dict(causal=True, window_size=128, chunk_size=128, overlap=True, use_rpe=False),
        # the paper's settings: a trainable RPE and attention dropout run on the blockwise kernel, which keeps
        # no chunk logits at all (chunk size 8 included)
        dict(window_size=64, num_chunks=16, use_rpe=True, dropout=0.1),
        dict(causal=True, window_size=128, chunk_size=8, use_rpe=True, dropout=0.1),
    ],
    ids=str,
)
def test_peak_memory_grows_linearly(options):
    """Forward + backward peak memory at N = 8192 is at most 2.3x that at N = 4096."""
    torch.manual_seed(0)
    ratio, small, large = growth(EVAAttention(EMBED, HEADS, **options), 4096, 8192)
    assert ratio <= RATIO, f"peak {small / 2**20:.1f} MiB -> {large / 2**20:.1f} MiB (x{ratio:.2f})"


def test_peak_memory_measurement_detects_quadratic_attention():
    """Sanity check of peak_bytes: exact softmax attention (N x N scores) fails the 2.3x bound."""
    torch.manual_seed(0)
    ratio, small, large = growth(SoftmaxAttention(), 1024, 2048)
    assert ratio > 3.0, f"peak {small / 2**20:.1f} MiB -> {large / 2**20:.1f} MiB (x{ratio:.2f})"
    # and it sees the scores: at least H x N x N floats (probabilities kept for backward) at N = 2048
    assert large >= HEADS * 2048 * 2048 * 4


class LargestTensor(TorchDispatchMode):
    """Records the largest numel among the outputs of every op run under it (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.largest, self.op = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest:
                self.largest, self.op = t.numel(), func
        return out


def largest_tensor(module, N, embed, key_padding_mask=None):
    torch.manual_seed(0)
    x = torch.randn(1 if key_padding_mask is None else key_padding_mask.size(0), N, embed, requires_grad=True)
    with LargestTensor() as mode:
        module(x, key_padding_mask=key_padding_mask).sum().backward()
    return mode.largest, mode.op


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_bidirectional_builds_nothing_quadratic(overlap, padded):
    """Bidirectional, N = 4096: the largest tensor is O(N (|E| + C)) per head, below N x N / 4 per sequence
    (padded: a batch of 2 with left padding takes the per-row chunk layout path)."""
    N, w, C, H = 4096, 64, 16, 4
    module = EVAAttention(64, H, window_size=w, num_chunks=C, overlap=overlap, use_rpe=True).train()
    mask = None
    if padded:
        mask = torch.zeros(2, N, dtype=torch.bool)
        mask[1, :1000] = True
    largest, op = largest_tensor(module, N, 64, mask)
    B = 1 if mask is None else 2
    width = 2 * w if overlap else w
    assert largest / B < N * N / 4, f"{op} made {largest} elements"
    assert largest <= 2 * B * H * N * (width + C), f"{op} made {largest} elements"


@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_causal_builds_nothing_quadratic_but_chunk_logits(overlap, rpe):
    """Causal, N = 4096, s = 8, w = 128: chunk logits are N x N/s by design, nothing reaches N x N / 2
    (a trainable RPE and no RPE take different code paths)."""
    N, w, s, H = 4096, 128, 8, 2
    module = EVAAttention(32, H, causal=True, window_size=w, chunk_size=s, overlap=overlap, use_rpe=rpe).train()
    largest, op = largest_tensor(module, N, 32)
    width = 2 * w if overlap else w
    assert largest < N * N / 2, f"{op} made {largest} elements"
    assert largest <= H * N * (width + N // s), f"{op} made {largest} elements"


def test_largest_tensor_detects_quadratic_attention():
    """Sanity check of the dispatch-mode recorder on exact softmax attention."""
    largest, _ = largest_tensor(SoftmaxAttention(), 512, EMBED)
    assert largest >= HEADS * 512 * 512
