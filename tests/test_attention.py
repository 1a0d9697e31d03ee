"""Tests of the EVA attention core against its definition (docs/design.md, "What EVA computes").

Exactness checks run in float64 with tolerance 1e-6: the special cases of section 2 against softmax
attention built from the module's own projections with explicit N x N masks, and the general case
against `reference_eva` (fairseq_eva/attention/reference.py), a slow per-query implementation written
straight from the definition. Tests that take the `kernel` fixture run on each registered kernel.
Then causality, incremental decoding, padding, numerics and option checking.
"""

import math
from pathlib import Path

import pytest
import torch
from eva_helpers import F64, KERNEL_NAMES, TOL, fixed_noise, inputs, make

from fairseq_eva.attention import EVAAttention, relative_position_bucket
from fairseq_eva.attention.layout import BlockLayout
from fairseq_eva.attention.reference import merge, qkv, reference_eva

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def masked_softmax(mod, x, allowed, bias=None):
    """Multi-head softmax attention with an explicit N x N mask (allowed[n, m]) and bias (H x N x N)."""
    q, k, v = qkv(mod, x)
    scores = q @ k.transpose(-1, -2) / math.sqrt(mod.head_dim)
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    return merge(mod, torch.softmax(scores, -1) @ v)


def rpe_matrix(mod, N):
    """H x N x N: the module's RPE at key-minus-query position m - n."""
    n = torch.arange(N)
    return mod.rpe(n[None, :] - n[:, None]).to(mod.q_proj.weight.dtype)


def block_local_mask(N, w, causal, overlap):
    n, m = torch.arange(N)[:, None], torch.arange(N)[None, :]
    start = (n // w) * w  # first position of n's block
    if causal:
        return (m <= n) & (m >= (start - w if overlap else start))
    half = w // 2 if overlap else 0
    return (m >= start - half) & (m < start + w + half)


def real_mask(lengths, N, side):
    """key_padding_mask (True = pad) for right or left padding."""
    pos = torch.arange(N)[None, :]
    lengths = torch.tensor(lengths)[:, None]
    return pos >= lengths if side == "right" else pos < N - lengths


@pytest.fixture(params=KERNEL_NAMES)
def kernel(request):
    """Runs a test on each registered kernel, chosen through EVAAttention(kernel=...); `make` skips, with the
    reason, where that kernel cannot compute the test's call here."""
    return request.param


# ------------------------------------------------------------------- 1. special cases and the definition


@pytest.mark.parametrize("window,overlap", [(13, False), (16, False), (14, True), (16, True)])
def test_bidirectional_full_window_no_chunks_is_softmax(window, overlap):
    """abs(E) >= N, C = 0, no RPE: one block holds every key, so EVA is exact softmax attention."""
    mod = make(window_size=window, overlap=overlap)
    x = inputs(2, 13)
    torch.testing.assert_close(mod(x), masked_softmax(mod, x, torch.ones(13, 13, dtype=torch.bool)), **TOL)


@pytest.mark.parametrize("chunk", [0, 1, 4, 16])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("N", [13, 16])
def test_causal_full_window_is_causal_softmax(chunk, overlap, N):
    """Causal, abs(E) >= N, no RPE: no chunk is ever visible, so EVA is exact causal softmax."""
    mod = make(causal=True, window_size=16, chunk_size=chunk, overlap=overlap)
    x = inputs(2, N)
    torch.testing.assert_close(mod(x), masked_softmax(mod, x, torch.ones(N, N).tril().bool()), **TOL)


@pytest.mark.parametrize("chunks", [dict(chunk_size=1), dict(num_chunks=11)])
def test_window0_singleton_chunks_identity_proposal_is_softmax(chunks):
    """Window 0, chunks of one token, sigma = identity: k~ = k_m and beta = v_m, exact softmax."""
    mod = make(window_size=0, proposal="identity", **chunks)
    x = inputs(2, 11)
    torch.testing.assert_close(mod(x), masked_softmax(mod, x, torch.ones(11, 11, dtype=torch.bool)), **TOL)


@pytest.mark.parametrize("proposal", ["layernorm", "linear", "identity"])
@pytest.mark.parametrize("chunks", [dict(num_chunks=1), dict(chunk_size=9)])
def test_window0_one_chunk_is_single_sample_snis(proposal, chunks):
    """Window 0 and one chunk: every output is the one-sample SNIS estimate beta (RFA connection)."""
    mod = make(window_size=0, proposal=proposal, **chunks)
    x = inputs(2, 9)
    q, k, v = qkv(mod, x)
    omega = mod.chunks.sigma_q(q.mean(2)) + mod.chunks.sigma_k(k.mean(2))  # B x H x d
    log_w = ((k * omega[:, :, None]).sum(-1) - 0.5 * (k * k).sum(-1)) / math.sqrt(mod.head_dim)
    beta = (torch.softmax(log_w, -1)[..., None] * v).sum(2)  # B x H x d
    expected = merge(mod, beta[:, :, None].expand_as(q))
    torch.testing.assert_close(mod(x), expected, **TOL)


@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize(
    "causal,window,overlap",
    [(False, 4, False), (False, 4, True), (False, 6, True), (True, 4, False), (True, 4, True), (True, 5, True)],
)
def test_no_chunks_is_block_local_softmax(causal, window, overlap, rpe):
    """C = 0: the paper's Local baseline, an explicitly masked block-local softmax; with RPE the bias
    inside the block is the module's rpe at key-minus-query position."""
    N = 18  # not a multiple of the window
    mod = make(causal=causal, window_size=window, overlap=overlap, use_rpe=rpe)
    x = inputs(2, N)
    bias = rpe_matrix(mod, N) if rpe else None
    expected = masked_softmax(mod, x, block_local_mask(N, window, causal, overlap), bias)
    torch.testing.assert_close(mod(x), expected, **TOL)


def test_block_local_check_is_sensitive_to_rpe():
    """Guard for the test above: the RPE is large enough that leaving it out is detected."""
    mod = make(window_size=4, use_rpe=True)
    x = inputs(1, 18)
    without = masked_softmax(mod, x, block_local_mask(18, 4, False, False))
    assert (mod(x) - without).abs().max() > 1e-2


BIDIRECTIONAL_CASES = [
    dict(window_size=4, num_chunks=3),
    dict(window_size=4, num_chunks=5),
    dict(window_size=6, chunk_size=5),
    dict(window_size=2, chunk_size=1),
    dict(window_size=0, chunk_size=3, proposal="linear"),
    dict(window_size=0, num_chunks=4, proposal="identity"),
]


@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize(
    "options",
    [{**case, "overlap": False} for case in BIDIRECTIONAL_CASES]
    + [{**case, "overlap": True} for case in BIDIRECTIONAL_CASES if case["window_size"] > 0],
    ids=str,
)
@pytest.mark.parametrize("N", [23, 9])
def test_bidirectional_matches_definition(options, rpe, N, kernel):
    """The fast batched implementation equals the per-query definition (E^n, all chunks, one softmax).
    N = 9 with C = 4 has an empty fourth chunk (size ceil(9/4) = 3), which must not be visible."""
    mod = make(use_rpe=rpe, kernel=kernel, **options)
    x = inputs(2, N)
    expected = torch.stack([reference_eva(mod, row) for row in x])
    torch.testing.assert_close(mod(x), expected, **TOL)


@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("window,chunk", [(8, 1), (8, 2), (8, 4), (8, 8), (4, 2), (6, 3)])
def test_causal_matches_definition(window, chunk, overlap, rpe, kernel):
    """Causal: E^n = n's block up to n (+ previous block), chunks visible iff they end before E^n.
    Checked on each kernel, and with "auto" with and without autograd (a trainable RPE may pick another)."""
    mod = make(causal=True, window_size=window, chunk_size=chunk, overlap=overlap, use_rpe=rpe, kernel=kernel)
    x = inputs(2, 37)
    expected = torch.stack([reference_eva(mod, row) for row in x])
    torch.testing.assert_close(mod(x), expected, **TOL)
    mod.kernel = "auto"
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(mod(x), expected, **TOL, msg=lambda m: f"auto, grad={grad}: {m}")


@pytest.mark.parametrize(
    "options",
    [
        dict(window_size=4, num_chunks=3, overlap=True),
        dict(window_size=4, chunk_size=4),  # 21 tokens: a partial last chunk
        dict(causal=True, window_size=4, chunk_size=2, overlap=True),
    ],
    ids=str,
)
def test_training_sample_enters_as_omega_equals_mu_plus_eps(options, monkeypatch):
    """In training omega_c = mu_c + eps: with eps pinned (torch.randn_like patched), the output equals the
    definition with that eps."""
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    mod = make(train=True, use_rpe=True, **options)
    x = inputs(2, 21)
    expected = torch.stack([reference_eva(mod, row, noise=lambda c: fixed_noise((2, c + 1, 8))[:, c]) for row in x])
    torch.testing.assert_close(mod(x), expected, **TOL)
    mod.eval()
    assert (mod(x) - expected).abs().max() > 1e-3  # the noise matters, so the check above is not vacuous


def test_relative_position_bucket_matches_t5():
    """Buckets equal T5's _relative_position_bucket (HF transformers' formula) for both directions."""

    def t5(relative_position, bidirectional, num_buckets, max_distance):
        buckets = torch.zeros_like(relative_position)
        if bidirectional:
            num_buckets //= 2
            buckets += (relative_position > 0).long() * num_buckets
            relative_position = relative_position.abs()
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).long()
        large = torch.min(large, torch.full_like(large, num_buckets - 1))
        return buckets + torch.where(relative_position < max_exact, relative_position, large)

    rel = torch.arange(-300, 301)
    for bidirectional in (False, True):
        for num_buckets, max_distance in ((32, 128), (8, 20)):
            got = relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
            assert torch.equal(got, t5(rel, bidirectional, num_buckets, max_distance))


# ------------------------------------------------------------------------------------------ 2. causality


def _padding_mask(side, B, N):
    if side is None:
        return None
    lengths = [N, N - 6][:B]
    return real_mask(lengths, N, side)


# mode: (train, attention dropout, autograd on)
MODES = {
    "eval": (False, 0.0, True),
    "eval-no-grad": (False, 0.0, False),
    "train": (True, 0.0, True),
    "dropout": (True, 0.2, True),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_causal_outputs_ignore_the_future(overlap, rpe, padding, mode, kernel):
    """Changing inputs after n leaves outputs up to n unchanged. One batch holds a copy per cut n; both
    forwards are reseeded so that training noise and dropout are drawn the same."""
    N, cuts = 19, (0, 3, 4, 8, 11, 17)
    train, dropout, grad = MODES[mode]
    mod = make(causal=True, window_size=4, chunk_size=2, overlap=overlap, use_rpe=rpe, train=train, dropout=dropout,
               kernel=kernel)
    x = inputs(2, N).repeat(len(cuts), 1, 1)  # row 2 i + b: sequence b, cut i
    mask = _padding_mask(padding, 2, N)
    mask = None if mask is None else mask.repeat(len(cuts), 1)
    future = (torch.arange(N)[None, :] > torch.tensor(cuts).repeat_interleave(2)[:, None]).unsqueeze(-1)
    x2 = x + torch.randn_like(x) * future
    with torch.set_grad_enabled(grad):
        torch.manual_seed(5)
        y = mod(x, key_padding_mask=mask)
        torch.manual_seed(5)
        y2 = mod(x2, key_padding_mask=mask)
    past = ~future.expand_as(y)
    torch.testing.assert_close(y2[past], y[past], **TOL)
    assert (y2 - y)[~past].abs().max() > 1e-3  # the change is seen downstream


@pytest.mark.parametrize("mode", ["eval", "train", "dropout"])
@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_causal_gradient_of_the_past_wrt_the_future_is_zero(overlap, rpe, padding, mode, kernel):
    """d y_n / d x_m is exactly zero for every m > n (for any training sample and dropout mask). One backward:
    the batch holds a copy of the sequences per n, and copy n back-propagates from y_n only."""
    N = 19
    train, dropout, _ = MODES[mode]
    mod = make(causal=True, window_size=4, chunk_size=2, overlap=overlap, use_rpe=rpe, train=train, dropout=dropout,
               kernel=kernel)
    x = inputs(2, N).repeat(N, 1, 1).requires_grad_()  # row 2 n + b: sequence b, output n
    mask = _padding_mask(padding, 2, N)
    mask = None if mask is None else mask.repeat(N, 1)
    n = torch.arange(N).repeat_interleave(2)
    y = mod(x, key_padding_mask=mask)
    picked = y[torch.arange(2 * N), n]  # y_n of each copy
    (g,) = torch.autograd.grad((picked * torch.randn_like(picked)).sum(), x)
    future = torch.arange(N)[None, :] > n[:, None]
    leaks = (future & (g.abs().sum(-1) > 0)).nonzero().tolist()
    assert not leaks, f"outputs depend on the future at (copy, position) {leaks}"
    if mask is not None:
        assert torch.all(g[mask] == 0), "an output depends on a pad input"
    if not dropout:  # (dropout may drop a query's only key)
        real = torch.ones(2 * N, dtype=torch.bool) if mask is None else ~mask[torch.arange(2 * N), n]
        assert torch.all(g[torch.arange(2 * N), n][real].abs().sum(-1) > 0)  # a real y_n does depend on x_n


@pytest.mark.parametrize("causal", [False, True])
def test_pad_inputs_do_not_matter(causal, kernel):
    """Whatever sits at padded positions (left or right) changes no output at a real position."""
    opts = dict(causal=True, window_size=4, chunk_size=2) if causal else dict(window_size=4, num_chunks=3)
    mod = make(kernel=kernel, use_rpe=True, overlap=True, **opts)
    for side in ("right", "left"):
        x = inputs(2, 19)
        mask = real_mask([19, 11], 19, side)
        y = mod(x, key_padding_mask=mask)
        x2 = x + torch.randn_like(x) * mask[..., None]
        torch.testing.assert_close(mod(x2, key_padding_mask=mask)[~mask], y[~mask], **TOL)


# ------------------------------------------------------------------------------- 3. incremental decoding


def _decode(mod, x, cache, step=1):
    return torch.cat([mod(x[:, t : t + step], cache=cache) for t in range(0, x.size(1), step)], dim=1)


@pytest.mark.parametrize("rpe", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("chunk", [0, 2, 4])
def test_incremental_decoding_matches_full_forward(chunk, overlap, rpe, kernel):
    """Token by token with a cache equals the parallel forward, over N = 37 (blocks of 8, chunks of 2 or 4)."""
    mod = make(kernel=kernel, causal=True, window_size=8, chunk_size=chunk, overlap=overlap, use_rpe=rpe)
    x = inputs(2, 37)
    with torch.no_grad():
        torch.testing.assert_close(_decode(mod, x, {}), mod(x), **TOL)


def test_incremental_decoding_several_tokens_per_call():
    """Calls with several new tokens at once (5, crossing blocks and chunks) also match the full forward."""
    mod = make(causal=True, window_size=8, chunk_size=2, overlap=True, use_rpe=True)
    x = inputs(2, 37)
    with torch.no_grad():
        torch.testing.assert_close(_decode(mod, x, {}, step=5), mod(x), **TOL)


@pytest.mark.parametrize("overlap", [False, True])
def test_incremental_decoding_with_reordered_cache(overlap, kernel):
    """Beam search: after EVAAttention.reorder_cache(cache, new_order), e.g. [2, 0, 0], the outputs so far and
    from then on match the full forward of the reordered prefixes, each continued with its own new tokens."""
    mod = make(kernel=kernel, causal=True, window_size=8, chunk_size=2, overlap=overlap, use_rpe=True)
    x = inputs(3, 37)
    orders = {13: torch.tensor([2, 0, 0]), 26: torch.tensor([1, 2, 0])}
    fed = x[:, :0]  # what each batch row has been fed so far (its prefix), reordered with the cache
    cache, outputs = {}, []
    with torch.no_grad():
        for t in range(37):
            if t in orders:
                EVAAttention.reorder_cache(cache, orders[t])
                outputs, fed = [o[orders[t]] for o in outputs], fed[orders[t]]
            token = x[:, t : t + 1]  # each beam continues with its own new token, as in beam search
            outputs.append(mod(token, cache=cache))
            fed = torch.cat([fed, token], dim=1)
        torch.testing.assert_close(torch.cat(outputs, dim=1), mod(fed), **TOL)
    # the sequences really are spliced: row 0 = x[0, :13] + x[1, 13:26] + x[0, 26:], rows 0 and 1 share a prefix
    assert torch.equal(fed[0, :13], x[0, :13]) and torch.equal(fed[0, 13:26], x[1, 13:26])
    assert torch.equal(fed[2, :13], x[2, :13]) and torch.equal(fed[1, :13], fed[0, :13])


@pytest.mark.parametrize("overlap", [False, True])
def test_incremental_cache_is_O_window_plus_chunks(overlap):
    """The cache keeps the current (and previous) block and one summary per completed chunk: after t tokens
    no cached tensor is longer than max(w (2w with overlap), t / s) along the position dimension."""
    w, s, N = 8, 4, 64
    mod = make(causal=True, window_size=w, chunk_size=s, overlap=overlap, use_rpe=True)
    x = inputs(1, N)
    cache = {}
    with torch.no_grad():
        for t in range(N):
            mod(x[:, t : t + 1], cache=cache)
            longest = max(v.size(2) for v in cache.values())
            assert longest <= max(w * (1 + overlap), (t + 1) // s), (t, {k: v.shape for k, v in cache.items()})
    assert all(v.dim() == 4 and v.size(0) == 1 for v in cache.values())


# -------------------------------------------------------------------------------------------- 4. padding


def _check_padded_batch(options, side):
    lengths = [37, 23, 5, 1]
    mod = make(**options)
    x = inputs(4, 37)
    mask = real_mask(lengths, 37, side)
    y = mod(x, key_padding_mask=mask)
    for b, L in enumerate(lengths):
        alone = mod(x[b : b + 1][~mask[b : b + 1]].view(1, L, -1))
        torch.testing.assert_close(y[b][~mask[b]], alone[0], **TOL)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(
    "options",
    [
        dict(window_size=4, num_chunks=3),
        dict(window_size=4, chunk_size=3),
        dict(window_size=0, num_chunks=4),
        dict(window_size=4, num_chunks=3, overlap=True, use_rpe=True),
        dict(window_size=6, chunk_size=4, overlap=True, use_rpe=True),
    ],
    ids=str,
)
def test_padded_batch_equals_each_sequence_alone(options, side, kernel):
    """A sequence's output does not depend on its batch: lengths 37, 23, 5, 1 padded to 37
    (blocks and chunks are laid out over each sequence's own tokens, C chunks of ceil(L / C))."""
    _check_padded_batch({**options, "kernel": kernel}, side)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(
    "options",
    [
        dict(window_size=4, chunk_size=2),
        dict(window_size=4, chunk_size=2, overlap=True, use_rpe=True),
        dict(window_size=6, chunk_size=3, overlap=True, use_rpe=True),
    ],
    ids=str,
)
def test_causal_padded_batch_equals_each_sequence_alone(options, side, kernel):
    """Causal: the same, lengths 37, 23, 5, 1 padded to 37."""
    _check_padded_batch({"causal": True, "kernel": kernel, **options}, side)


@pytest.mark.parametrize(
    "options",
    [dict(window_size=4, num_chunks=3), dict(window_size=0, chunk_size=2), dict(causal=True, window_size=4, chunk_size=2)],
    ids=str,
)
@pytest.mark.parametrize("train", [False, True])
def test_fully_masked_rows_are_finite(options, train):
    """A row whose every key is a pad gives zeros before out_proj, finite gradients (no NaN anywhere)."""
    mod = make(overlap=options.get("window_size", 0) > 0, use_rpe=True, train=train, **options)
    x = inputs(3, 10, requires_grad=True)
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[1] = True
    mask[2, :4] = True
    for m in (mask, torch.ones(3, 10, dtype=torch.bool)):
        mod.zero_grad()
        y = mod(x, key_padding_mask=m)
        assert torch.isfinite(y).all()
        # every candidate masked: the attention returns zeros, so the output is the out_proj bias
        torch.testing.assert_close(y[m.all(1)], mod.out_proj.bias.expand_as(y[m.all(1)]), **TOL)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), x, retain_graph=True)
        y.pow(2).sum().backward()
        assert torch.isfinite(gx).all()
        assert all(torch.isfinite(p.grad).all() for p in mod.parameters() if p.grad is not None)


def test_key_padding_mask_shape_is_checked():
    """A key_padding_mask that is not B x N is rejected with a ValueError naming it."""
    mod = make(window_size=4, num_chunks=2)
    with pytest.raises(ValueError, match="key_padding_mask"):
        mod(inputs(2, 10), key_padding_mask=torch.zeros(2, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        mod(inputs(2, 10), key_padding_mask=torch.zeros(10, 2, dtype=torch.bool))


# ------------------------------------------------------------------------------------------- 5. numerics


NUMERIC_CASES = [
    dict(window_size=4, num_chunks=3, overlap=True, use_rpe=True),
    dict(window_size=0, chunk_size=3),
    dict(causal=True, window_size=4, chunk_size=2, overlap=True, use_rpe=True),
]


@pytest.mark.parametrize("options", NUMERIC_CASES, ids=str)
def test_training_gradients_are_finite_for_all_parameters(options):
    """Train mode (sampled omega): every parameter gets a finite, non-zero gradient."""
    mod = make(train=True, **options)
    x = inputs(2, 19, requires_grad=True)
    mask = real_mask([19, 12], 19, "left")
    mod(x, key_padding_mask=mask).pow(2).sum().backward()
    for name, p in mod.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("options", NUMERIC_CASES, ids=str)
def test_low_precision_with_large_logits_is_finite(options, dtype):
    """float16 / bfloat16 forward (and backward) on CPU stay finite with logits of order 1e3."""
    if dtype == torch.float16:
        try:
            torch.ones(2, 2, dtype=dtype) @ torch.ones(2, 2, dtype=dtype)
        except RuntimeError as error:  # pragma: no cover - depends on the CPU build
            pytest.skip(f"float16 matmul is unsupported on this CPU build: {error}")
    mod = make(embed=32, heads=2, dtype=torch.float32, **options)
    x = inputs(2, 40, embed=32, dtype=torch.float32)
    q, k, _ = qkv(mod, x)
    x = x * math.sqrt(1.5e3 / (q @ k.transpose(-1, -2) / math.sqrt(mod.head_dim)).abs().max().item())
    with torch.no_grad():
        q, k, _ = qkv(mod, x)
        assert (q @ k.transpose(-1, -2) / math.sqrt(mod.head_dim)).abs().max() > 1e3  # the test is meaningful
    mod = mod.to(dtype).train()
    x = x.to(dtype).requires_grad_()
    mask = real_mask([40, 27], 40, "right")
    y = mod(x, key_padding_mask=mask)
    assert y.dtype == dtype and torch.isfinite(y).all()
    y.float().pow(2).mean().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mod.parameters() if p.grad is not None)


@pytest.mark.parametrize("options", NUMERIC_CASES, ids=str)
def test_evaluation_is_deterministic_and_training_samples(options):
    """Eval: omega = mu, two forwards are identical. Train (dropout 0): omega is sampled, forwards differ."""
    mod = make(**options)
    x = inputs(2, 19)
    assert torch.equal(mod(x), mod(x))
    mod.train()
    assert (mod(x) - mod(x)).abs().max() > 1e-6


@pytest.mark.parametrize("options", NUMERIC_CASES, ids=str)
def test_without_omega_noise_training_equals_evaluation(options):
    """omega_noise=False (the diagnostic of --eva-omega-noise false): training takes omega = mu, as evaluation
    does, so with dropout 0 the two outputs agree; the default samples (the test above)."""
    mod = make(omega_noise=False, **options)
    x = inputs(2, 19)
    y = mod(x)
    torch.testing.assert_close(mod.train()(x), y, **TOL)


@pytest.mark.parametrize("rpe_type", ["buckets", "table"])
@pytest.mark.parametrize("options", [dict(causal=True, window_size=4, chunk_size=2),
                                     dict(causal=True, window_size=4, chunk_size=4, overlap=True),
                                     dict(window_size=4, num_chunks=3), dict(window_size=4, chunk_size=3, overlap=True)],
                         ids=str)
def test_chunk_logit_offset_is_carried_by_the_local_bias(options, rpe_type, kernel):
    """chunk_logit_offset=b adds -b to the relative position bias (buckets or per-place table alike). That layer
    computes what the reference computes with every chunk logit raised by b, and every parameter gets the same
    gradient, so training (Adam, no weight decay) takes the same steps in both."""
    b = math.log(3)
    plain = make(use_rpe=True, rpe_type=rpe_type, kernel=kernel, **options)
    shifted = make(use_rpe=True, rpe_type=rpe_type, kernel=kernel, chunk_logit_offset=b, **options)  # the same parameters
    x = inputs(2, 13)
    expected = torch.stack([reference_eva(plain, row, chunk_logit_offset=b) for row in x])
    y = shifted(x)
    torch.testing.assert_close(y, expected, **TOL)
    assert (y - plain(x)).abs().max() > 1e-3  # b does matter
    expected.pow(2).sum().backward()
    y.pow(2).sum().backward()
    for (name, p), q in zip(plain.named_parameters(), shifted.parameters()):
        torch.testing.assert_close(q.grad, p.grad, **TOL, msg=name)


def test_chunk_logit_offset_needs_chunks_and_the_local_bias():
    for options in (dict(window_size=4, num_chunks=2, use_rpe=False), dict(window_size=4, num_chunks=0, use_rpe=True),
                    dict(window_size=0, num_chunks=2, use_rpe=True)):
        with pytest.raises(ValueError, match="chunk_logit_offset .* needs chunks and the relative position bias"):
            EVAAttention(16, 2, chunk_logit_offset=1.0, **options)
    with pytest.raises(ValueError, match="chunk_logit_offset must be a finite number"):
        EVAAttention(16, 2, window_size=4, num_chunks=2, chunk_logit_offset=float("nan"))


@pytest.mark.parametrize("causal", [False, True])
def test_without_chunks_training_equals_evaluation(causal):
    """With no chunks and dropout 0 nothing is sampled: train and eval outputs agree."""
    mod = make(causal=causal, window_size=4, use_rpe=True)
    x = inputs(2, 19)
    y = mod(x)
    torch.testing.assert_close(mod.train()(x), y, **TOL)


# ------------------------------------------------------------------------------------------- 7. options


@pytest.mark.parametrize(
    "kwargs,option",
    [
        (dict(window_size=-1, num_chunks=2), "window_size"),
        (dict(window_size=4, num_chunks=-1), "num_chunks"),
        (dict(window_size=4, chunk_size=-2), "chunk_size"),
        (dict(causal=True, window_size=4, chunk_size=-2), "chunk_size"),
        (dict(window_size=0, num_chunks=0, chunk_size=0), "window_size"),
        (dict(causal=True, window_size=8, chunk_size=3), "chunk_size"),
        (dict(causal=True, window_size=0, chunk_size=2), "window_size"),
        (dict(causal=True, window_size=0), "window_size"),
        (dict(embed_dim=10, num_heads=3, window_size=4), "num_heads"),
        (dict(window_size=4, num_chunks=2, chunk_size=2), "num_chunks.*chunk_size|chunk_size.*num_chunks"),
        (dict(window_size=4, num_chunks=2, proposal="gaussian"), "proposal"),
        (dict(window_size=5, overlap=True, num_chunks=2), "overlap"),
        (dict(causal=True, window_size=8, num_chunks=2), "num_chunks"),
        (dict(window_size=4, dropout=1.5), "dropout"),
        (dict(window_size=4, compile="max-autotune"), "compile"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(kwargs, option):
    """Bad settings fail at construction with a ValueError whose message names the option."""
    kwargs = {"embed_dim": 16, "num_heads": 2, **kwargs}
    with pytest.raises(ValueError, match=option):
        EVAAttention(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(window_size=0, num_chunks=3),
        dict(window_size=0, chunk_size=1),
        dict(window_size=4),
        dict(window_size=6, overlap=True),
        dict(causal=True, window_size=1),
        dict(causal=True, window_size=5, overlap=True),
        dict(causal=True, window_size=8, chunk_size=8),
    ],
    ids=str,
)
def test_legal_edge_settings_are_accepted(kwargs):
    """Window 0 or C = 0 (not both), causal window 1, odd causal overlap windows are legal and run."""
    mod = make(**kwargs)
    assert torch.isfinite(mod(inputs(1, 7))).all()


def test_state_dict_keeps_separate_q_k_v_projections():
    """A layer saved by an earlier version loads and computes what it computed then (the fixture holds that layer's
    output, pads included); a layer saves its state in that layout (fairseq's names), parameters in its order, so
    that a run's optimizer state fits on resume."""
    saved = torch.load(Path(__file__).parent / "fixtures" / "eva_attention_separate_qkv.pt")
    assert {"q_proj.weight", "k_proj.bias"} <= set(saved["state_dict"])
    mod = EVAAttention(16, 2, window_size=4, overlap=True, num_chunks=2, use_rpe=True, kernel="blockwise").to(F64).eval()
    mod.load_state_dict(saved["state_dict"])
    assert torch.equal(mod.q_proj.weight, saved["state_dict"]["q_proj.weight"])
    with torch.no_grad():
        torch.testing.assert_close(mod(saved["x"], saved["key_padding_mask"]), saved["y"], **TOL)
    state = mod.state_dict()
    assert list(state) == list(saved["state_dict"])
    assert all(torch.equal(state[key], value) for key, value in saved["state_dict"].items())


def test_rpe_table_is_kept_and_trained():
    """The buckets of a layout are computed once; the table follows the trained values."""
    mod = make(window_size=4, num_chunks=2, use_rpe=True)
    layout = BlockLayout.bidirectional(4, False)
    first = mod.rpe.table(layout, torch.device("cpu"))
    assert len(mod.rpe._buckets) == 1
    assert torch.equal(first, mod.rpe(layout.offsets()))
    with torch.no_grad():
        mod.rpe.bias.weight.add_(1.0)
    assert torch.equal(mod.rpe.table(layout, torch.device("cpu")), first + 1.0)
    assert len(mod.rpe._buckets) == 1


def test_padding_layout_is_derived_once_per_mask():
    """Layers given the same padding mask share its layout; a new mask, or one changed in place, gets its own."""
    from fairseq_eva.attention.eva import padding_order

    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, :2] = True
    first = padding_order(mask)
    assert padding_order(mask) is first
    assert first[1].tolist() == [6, 4] and first[0][1].tolist() == [2, 3, 4, 5, 0, 1]
    mask[0, 0] = True
    assert padding_order(mask)[1].tolist() == [5, 4]
    assert padding_order(mask.clone()) is not padding_order(mask)


def test_chunk_values_backward_is_autograds():
    """ChunkValues (beta with its backward written out) against autograd through its formula, float64."""
    from fairseq_eva.attention.chunks import ChunkValues

    g = torch.Generator().manual_seed(0)
    omega, k, v = (torch.randn(*shape, generator=g, dtype=F64, requires_grad=True)
                   for shape in ((2, 3, 4, 5), (2, 3, 4, 6, 5), (2, 3, 4, 6, 5)))
    assert torch.autograd.gradcheck(lambda *t: ChunkValues.apply(*t, 0.4), (omega, k, v))
    logits = ((k * omega.unsqueeze(3)).sum(-1) - 0.5 * k.square().sum(-1)) * 0.4
    expected = (torch.softmax(logits, -1).unsqueeze(-1) * v).sum(3)
    torch.testing.assert_close(ChunkValues.apply(omega, k, v, 0.4), expected, atol=1e-12, rtol=0)


def _hand_summaries(mod, x, size, mean_factor, eps=None):
    """k~ and beta (H x C x d) of one all-real sequence x by hand in float64: chunk means by loops, sigma as
    Linear then LayerNorm written out, mu = mean_factor (sigma_q + sigma_k), omega = mu (+ eps in training)."""
    q, k, v = (t[0] for t in qkv(mod, x[None]))  # H x L x d
    L, d = x.size(0), mod.head_dim

    def sigma(proj, z):
        linear, norm = proj[0], proj[1]
        z = z @ linear.weight.T + linear.bias
        z = (z - z.mean(-1, keepdim=True)) / torch.sqrt(z.var(-1, unbiased=False, keepdim=True) + norm.eps)
        return z * norm.weight + norm.bias

    k_sums, betas = [], []
    for c, a in enumerate(range(0, L, size)):
        P = list(range(a, min(a + size, L)))
        q_mean = sum(q[:, m] for m in P) / len(P)
        k_mean = sum(k[:, m] for m in P) / len(P)
        k_sum = sigma(mod.chunks.sigma_k, k_mean)
        omega = mean_factor * (sigma(mod.chunks.sigma_q, q_mean) + k_sum)
        if eps is not None:
            omega = omega + eps[:, c]
        logits = torch.stack([((omega * k[:, m]).sum(-1) - 0.5 * k[:, m].pow(2).sum(-1)) / math.sqrt(d) for m in P], -1)
        p = torch.softmax(logits, -1)
        betas.append(sum(p[:, i, None] * v[:, m] for i, m in enumerate(P)))
        k_sums.append(k_sum)
    return torch.stack(k_sums, 1), torch.stack(betas, 1)


@pytest.mark.parametrize("options, size", [(dict(window_size=4, num_chunks=3), 7), (dict(window_size=4, chunk_size=4), 4),
                                           (dict(causal=True, window_size=4, chunk_size=2), 2)], ids=str)
def test_proposal_mean_average_halves_mu_and_not_the_noise(options, size, monkeypatch):
    """proposal_mean="average" (--eva-proposal-mean average, the authors' bidirectional code) takes mu_c = (sigma_q
    + k~_c) / 2; the default "sum" is the paper's mu_c = sigma_q + k~_c. k~ (the summaries' keys) is the same in
    both; in training the noise is added after halving. Against a float64 hand computation, on the PyTorch paths
    (uniform chunks, and segmented ones: 19 tokens in chunks of 7, or padded rows)."""
    x = inputs(1, 19 if size == 7 else 20)
    default = make(**options)
    assert default.chunks.proposal_mean == "sum"
    average = make(proposal_mean="average", **options)  # the same parameters (make's seed)
    q, k, v = qkv(average, x)
    for mod, factor in ((default, 1.0), (average, 0.5)):
        k_hand, beta_hand = _hand_summaries(mod, x[0], size, factor)
        if options.get("num_chunks"):
            lengths = torch.tensor([x.size(1)])
            k_sum, beta, _ = mod._bidirectional_chunks(q, k, v, lengths)
        else:
            k_sum, beta = mod.chunks.uniform(q, k, v, size)
        torch.testing.assert_close(k_sum[0], k_hand, **TOL)
        torch.testing.assert_close(beta[0], beta_hand, **TOL)
    assert (average.chunks.uniform(q[:, :, :4], k[:, :, :4], v[:, :, :4], 4)[1]
            - default.chunks.uniform(q[:, :, :4], k[:, :, :4], v[:, :, :4], 4)[1]).abs().max() > 1e-3  # it matters
    # training: omega = mu / 2 + eps, eps not halved
    monkeypatch.setattr(torch, "randn_like", lambda t, **kw: fixed_noise(t.shape[-3:]).to(t).expand_as(t))
    average.train()
    C = math.ceil(x.size(1) / size)
    k_hand, beta_hand = _hand_summaries(average, x[0], size, 0.5, eps=fixed_noise((2, C, 8)))
    if options.get("num_chunks"):
        _, beta, _ = average._bidirectional_chunks(q, k, v, torch.tensor([x.size(1)]))
    else:
        _, beta = average.chunks.uniform(q, k, v, size)
    torch.testing.assert_close(beta[0], beta_hand, **TOL)


@pytest.mark.parametrize("options", [dict(window_size=4, num_chunks=3), dict(window_size=4, chunk_size=3, overlap=True),
                                     dict(causal=True, window_size=4, chunk_size=2)], ids=str)
def test_proposal_mean_average_layer_equals_reference(options, kernel):
    """The whole layer with proposal_mean="average" equals the per-query definition with mu halved, on each
    kernel, padded rows included (their chunks over each row's own tokens: the segmented path)."""
    mod = make(proposal_mean="average", use_rpe=True, kernel=kernel, **options)
    x = inputs(2, 13)
    expected = torch.stack([reference_eva(mod, row) for row in x])
    torch.testing.assert_close(mod(x), expected, **TOL)
    if not mod.causal:
        mask = real_mask([13, 9], 13, "left")
        y = mod(x, key_padding_mask=mask)
        torch.testing.assert_close(y[1, 4:], reference_eva(mod, x[1, 4:]), **TOL)


def test_proposal_mean_is_checked():
    with pytest.raises(ValueError, match="proposal_mean must be one of sum, average; got 'half'"):
        EVAAttention(16, 2, num_chunks=2, proposal_mean="half")


# ------------------------------------------------------------------ 8. a per-place bias table (rpe_type="table")


PLACE_CASES = [
    dict(window_size=4, num_chunks=3),
    dict(window_size=4, num_chunks=3, overlap=True),
    dict(causal=True, window_size=4, chunk_size=2),
    dict(causal=True, window_size=4, chunk_size=2, overlap=True),
]


def place_table(**options):
    """A layer with a random per-place bias table (make randomises it at std 1)."""
    return make(use_rpe=True, rpe_type="table", **options)


@pytest.mark.parametrize("options", PLACE_CASES, ids=str)
def test_place_table_matches_definition(options, kernel):
    """rpe_type="table": the bias of query n and local key m is table[h, n's place in its block, m's place in n's
    window], the same for every block; the layer equals the per-query definition, a left-padded row too."""
    mod = place_table(kernel=kernel, **options)
    x = inputs(2, 13)  # not a multiple of the window
    expected = torch.stack([reference_eva(mod, row) for row in x])
    torch.testing.assert_close(mod(x), expected, **TOL)
    mask = real_mask([13, 9], 13, "left")
    torch.testing.assert_close(mod(x, key_padding_mask=mask)[1, 4:], reference_eva(mod, x[1, 4:]), **TOL)


def test_place_table_is_not_a_function_of_the_offset():
    """Guard for the test above: two places of one offset have their own biases, and the output sees them."""
    mod = place_table(window_size=4, num_chunks=3)
    x = inputs(1, 13)
    y = mod(x)
    with torch.no_grad():
        mod.rpe.bias[:, 1, 1] += 3.0  # query place 1, key place 1 (offset 0); place (0, 0) keeps its value
    assert (mod(x) - y).abs().max() > 1e-3
    assert mod.rpe(0, 0).ne(mod.rpe(1, 1)).all()


@pytest.mark.parametrize("options", PLACE_CASES, ids=str)
def test_place_table_evaluates_on_the_fused_cpu_kernel(options):
    """Without autograd the table needs no gradient: torch's fused CPU kernel (which gives a bias none) evaluates the
    layer, and equals the definition."""
    mod = place_table(**options)
    mod.kernel = "fused"
    x = inputs(2, 13)
    with torch.no_grad():
        torch.testing.assert_close(mod(x), torch.stack([reference_eva(mod, row) for row in x]), **TOL)
    with pytest.raises(ValueError, match="fused CPU kernel gives no gradient to a trainable relative position bias"):
        mod(x)


@pytest.mark.parametrize("causal", [False, True])
def test_place_table_padded_batch_equals_each_sequence_alone(causal, kernel):
    """Lengths 37, 23, 5, 1 left-padded to 37: each row's places are counted from its own first real token."""
    options = dict(causal=True, window_size=4, chunk_size=2) if causal else dict(window_size=4, num_chunks=3)
    _check_padded_batch({**options, "overlap": True, "use_rpe": True, "rpe_type": "table", "kernel": kernel}, "left")


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("chunk", [0, 2])
def test_place_table_incremental_decoding_matches_full_forward(chunk, overlap, kernel):
    """Decoding takes the table's row of the token's place in its block: token by token equals the forward."""
    mod = place_table(kernel=kernel, causal=True, window_size=8, chunk_size=chunk, overlap=overlap)
    x = inputs(2, 37)
    with torch.no_grad():
        torch.testing.assert_close(_decode(mod, x, {}), mod(x), **TOL)
        torch.testing.assert_close(_decode(mod, x, {}, step=5), mod(x), **TOL)


@pytest.mark.parametrize("overlap", [False, True])
def test_place_table_causal_gradient_of_the_past_wrt_the_future_is_zero(overlap, kernel):
    """No leakage through the table: d y_n / d x_m is zero for m > n (training, right padding)."""
    N = 19
    mod = place_table(causal=True, window_size=4, chunk_size=2, overlap=overlap, train=True, kernel=kernel)
    x = inputs(2, N).repeat(N, 1, 1).requires_grad_()  # row 2 n + b: sequence b, output n
    mask = _padding_mask("right", 2, N).repeat(N, 1)
    n = torch.arange(N).repeat_interleave(2)
    picked = mod(x, key_padding_mask=mask)[torch.arange(2 * N), n]
    (g,) = torch.autograd.grad((picked * torch.randn_like(picked)).sum(), x)
    future = torch.arange(N)[None, :] > n[:, None]
    assert not (future & (g.abs().sum(-1) > 0)).any()


@pytest.mark.parametrize("options", [PLACE_CASES[1], PLACE_CASES[3]], ids=str)
def test_place_table_gradient_passes_gradcheck(options):
    """The table's gradient (summed over the blocks that share it), float64 gradcheck of a tiny layer with a padded
    row, on the blockwise kernel (the float64 one that gives the bias a gradient on the CPU)."""
    mod = place_table(embed=8, kernel="blockwise", **options)
    x = inputs(2, 10, embed=8)
    mask = real_mask([10, 7], 10, "left")

    def layer(table):
        return torch.func.functional_call(mod, {"rpe.bias": table}, (x,), {"key_padding_mask": mask})

    assert torch.autograd.gradcheck(layer, (mod.rpe.bias.detach().clone().requires_grad_(),))
    mod(x, key_padding_mask=mask).pow(2).sum().backward()
    assert mod.rpe.bias.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["eva", "local"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("overlap", [False, True])
def test_place_table_has_window_by_width_by_heads_parameters(name, causal, overlap):
    """w x width x H learned biases a layer (width = w, or 2w with overlap), for EVA and local attention alike."""
    from fairseq_eva.attention import registry
    from fairseq_eva.attention.relative_position import PlaceBias

    chunks = {} if name == "local" else dict(num_chunks=0, chunk_size=2) if causal else dict(num_chunks=2)
    mod = registry.build(name, 16, 2, causal=causal, window_size=4, overlap=overlap, rpe_type="table", **chunks)
    assert isinstance(mod.rpe, PlaceBias) and dict(mod.rpe.named_parameters())["bias"].shape == (2, 4, 8 if overlap else 4)
    assert sum(p.numel() for p in mod.rpe.parameters()) == 4 * (8 if overlap else 4) * 2
    assert mod.rpe.bias.std() < 0.1  # initialised as the buckets: normal, std 0.02
    assert type(registry.build(name, 16, 2, causal=causal, window_size=4, **chunks).rpe).__name__ == "RelativePositionBias"


def test_place_table_needs_the_bias_inside_a_window():
    for options in (dict(window_size=4, num_chunks=2, use_rpe=False), dict(window_size=0, num_chunks=2)):
        with pytest.raises(ValueError, match=r"^rpe_type table is a bias inside the window: it needs use_rpe true and "
                                             r"window_size > 0$"):
            EVAAttention(16, 2, rpe_type="table", **options)
    with pytest.raises(ValueError, match="rpe_type must be one of buckets, table; got 'offsets'"):
        EVAAttention(16, 2, window_size=4, rpe_type="offsets")


@pytest.mark.parametrize("side", ["right", "left"])
def test_chunks_and_a_window_beyond_the_sequence_cost_what_the_sequence_does(side):
    """C beyond N: the chunks past the sequence hold no token and are not laid out (C = 10^6 over 11 tokens runs as
    C = 11 does); a window beyond N is laid out over the sequence, with the same local sets (bidirectional, with and
    without overlap; causal with chunks, which none of its one block sees). Same output, with the bias."""
    x, mask = inputs(3, 11), real_mask([11, 7, 4], 11, side)
    for huge, small in (
        (dict(num_chunks=10**6), dict(num_chunks=11)),
        (dict(window_size=10**6, num_chunks=3), dict(window_size=12, num_chunks=3)),
        (dict(window_size=10**6, overlap=True, num_chunks=3), dict(window_size=12, overlap=True, num_chunks=3)),
        (dict(causal=True, window_size=4 * 10**5, chunk_size=4), dict(causal=True, window_size=12, chunk_size=4)),
    ):
        options = dict(window_size=4, use_rpe=True)
        big, ok = make(**{**options, **huge}), make(**{**options, **small})
        torch.testing.assert_close(big(x, None if big.causal else mask), ok(x, None if ok.causal else mask), **TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_sentences_shorter_than_the_window_at_the_papers_sizes_match_the_definition(causal):
    """The paper's translation encoder (head width 64, 8 heads, EVA-32: windows of 16 with overlap, C = 8) and its
    LM decoder (windows of 128, chunks of 8) on sequences shorter than one window, where the layer lays out the
    sequence instead of the whole window: each row equals the per-query definition, with the bias."""
    options = dict(causal=True, window_size=128, chunk_size=8) if causal else dict(window_size=16, overlap=True,
                                                                                  num_chunks=8)
    mod = make(embed=512, heads=8, use_rpe=True, **options)
    for N in (5, 13, 31) if not causal else (9, 100):
        x = inputs(2, N, embed=512)
        expected = torch.stack([reference_eva(mod, row) for row in x])
        torch.testing.assert_close(mod(x), expected, **TOL)
