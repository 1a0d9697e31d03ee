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
from fairseq_eva.attention.kernels import KERNELS, blockwise

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


# The training peak in terms of q's size: a layer of d_model 128, 2 heads, N = 2048; windows of 32, 4 chunks
# (bidirectional), chunks of 32 (causal: 64 summaries). Plain, and the paper's trainable bias and dropout.
PEAK_EMBED, PEAK_HEADS, PEAK_N, PEAK_WINDOW = 128, 2, 2048, 32
PEAK_SETTINGS = {
    "bidirectional": dict(window_size=PEAK_WINDOW, num_chunks=4, use_rpe=False),
    "bidirectional+rpe+dropout": dict(window_size=PEAK_WINDOW, num_chunks=4, use_rpe=True, dropout=0.1),
    "causal": dict(causal=True, window_size=PEAK_WINDOW, chunk_size=PEAK_WINDOW, use_rpe=False),
    "causal+rpe+dropout": dict(causal=True, window_size=PEAK_WINDOW, chunk_size=PEAK_WINDOW, use_rpe=True, dropout=0.1),
}
# CPU kernels not held to it: the reference is the definition query by query (its autograd keeps every query's
# keys), and the Triton kernel runs on the CPU only under Triton's interpreter
CPU_KERNELS = [name for name, spec in KERNELS.items() if "cpu" in spec.devices and name not in ("reference", "triton")]


@pytest.mark.parametrize("setting", PEAK_SETTINGS)
@pytest.mark.parametrize("kernel", CPU_KERNELS)
def test_training_peak_is_what_the_backward_holds(kernel, setting, monkeypatch):
    """Forward + backward peak of the layer on each CPU kernel, Q the size of q (B x N x d_model floats), at most

        8 Q     q, k and v (kept for the backward), the output (held by the caller until the backward ends), the
                gradient that reaches the attention, and the gradients of q, k and v
      + the parameters' gradients
      + 16 tensors of the summaries' size (B x H x C x d): the chunk means of q and k, their proposal, omega, k~,
        beta and their gradients
      + Q / 2   the rest: a group of blocks (the blockwise kernel's held at 2^13 logits here), masks, log-sum-exp

    and for the fused kernel what it keeps by design: its output (Q), and bidirectional, each block's keys and
    values as [local keys ; summaries] (r = (w + C) / w times k's size) besides k and v, with their gradients in
    place of dk and dv (2 r Q + 2 (r - 1) Q more). A copy of q, k or v kept for the backward exceeds it (as when q,
    k, v were views of one concatenated product, which the C loop copied into its layout)."""
    options = PEAK_SETTINGS[setting]
    spec = KERNELS[kernel]
    d = PEAK_EMBED // PEAK_HEADS
    reason = spec.unavailable() or spec.refusal(torch.empty(1, PEAK_HEADS, PEAK_N, d), needs_grad=True,
                                                dropout=options.get("dropout", 0.0), bias_grad=options["use_rpe"])
    if reason:
        pytest.skip(f"{kernel}: {reason}")
    monkeypatch.setitem(blockwise.GROUP_ELEMENTS, "cpu", 2**13)
    torch.manual_seed(0)
    module = EVAAttention(PEAK_EMBED, PEAK_HEADS, kernel=kernel, **options).train()
    x = torch.randn(1, PEAK_N, PEAK_EMBED, requires_grad=True)
    grad = torch.randn_like(x)

    def run():
        module.zero_grad(set_to_none=True)
        x.grad = None
        module(x).backward(grad)

    peak = peak_bytes(run)
    Q = x.numel() * x.element_size()
    C = options.get("num_chunks") or PEAK_N // options["chunk_size"]
    summaries = 16 * PEAK_HEADS * C * d * x.element_size()
    parameters = sum(p.numel() * p.element_size() for p in module.parameters())
    kept = 0.0
    if kernel == "fused":
        r = (PEAK_WINDOW + C) / PEAK_WINDOW
        kept = 1 + (0 if options.get("causal") else 2 * r + 2 * (r - 1))
    bound = (8 + kept + 0.5) * Q + parameters + summaries
    assert peak <= bound, f"peak {peak / Q:.2f} Q above {bound / Q:.2f} Q (Q = {Q / 2**20:.2f} MiB)"
