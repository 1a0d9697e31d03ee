"""The pieces every program of the Triton kernel shares: which keys a tile of queries sees, its logits (base 2),
and the dropout mask, so that the forward and the four backward programs cannot disagree on them."""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # logits are kept in base 2: exp2(s log2 e) = exp(s)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def visible_chunks(block, C, CAUSAL: tl.constexpr, OVERLAP: tl.constexpr, CHUNKS_PER_BLOCK: tl.constexpr):
    """How many chunk summaries block `block` sees (layout.visible_chunks): all, or the causal staircase."""
    if CAUSAL:
        return tl.minimum(C, tl.maximum(block - OVERLAP, 0) * CHUNKS_PER_BLOCK)
    else:
        return C


@triton.jit
def local_keys(block, first_query, length, WINDOW: tl.constexpr, OFFSET: tl.constexpr, WIDTH: tl.constexpr,
               CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr):
    """The local keys a tile of queries [first_query, first_query + BLOCK_M) of `block` sees: (first_key, lo, hi),
    column j of the block being position first_key + j and the positions [lo, hi) the ones to loop over (inside
    the sequence, and, causal, not after the tile's last query)."""
    first_key = block * WINDOW + OFFSET
    lo = tl.maximum(first_key, 0)
    hi = tl.minimum(first_key + WIDTH, length)
    if CAUSAL:
        hi = tl.minimum(hi, block * WINDOW + tl.minimum(first_query + BLOCK_M, WINDOW))
    return first_key, lo, hi


@triton.jit
def local_logits(qk, i, j, rpe_ptr, scale_log2, WINDOW: tl.constexpr, NUM_OFFSETS: tl.constexpr, HAS_RPE: tl.constexpr):
    """Base-2 logits of query rows i (block-relative) against local columns j: scale q.k plus rpe[j - i + w - 1].
    i and j are broadcast already (BM x 1 and 1 x BN, or the transpose)."""
    s = qk * scale_log2
    if HAS_RPE:
        index = tl.minimum(tl.maximum(j - i + WINDOW - 1, 0), NUM_OFFSETS - 1)  # hidden keys may lie outside the table
        s += tl.load(rpe_ptr + index).to(tl.float32) * LOG2E
    return s


@triton.jit
def _draw(seed, row, group):
    """One Philox draw at counter (group, row): four 32-bit words, for keys 4 group .. 4 group + 3."""
    return tl.randint4x(seed, (row.to(tl.int64) << 32) + group.to(tl.int64))


@triton.jit
def dropout_keep_each(seed, row, key, p):
    """The keep mask of (query row, key index), row = (b H + h) N + n, key = local column j or width + c, element
    by element: word key % 4 of the draw of group key // 4 (what dropout_keep gives, at one draw a weight)."""
    r0, r1, r2, r3 = _draw(seed, row, key >> 2)
    word = key & 3
    r = tl.where(word == 0, r0, tl.where(word == 1, r1, tl.where(word == 2, r2, r3)))
    return tl.random.uint_to_uniform_float(r) >= p


@triton.jit
def dropout_keep(seed, row, first_key, p, BLOCK_N: tl.constexpr, ALIGNED: tl.constexpr):
    """The keep mask of query rows `row` (BLOCK_M) and keys first_key + [0, BLOCK_N): BLOCK_M x BLOCK_N. ALIGNED
    (first_key and BLOCK_N multiples of 4): one Philox draw per four keys, its four words laid side by side;
    otherwise element by element. Both give the same mask, so any tiling draws the same one."""
    if ALIGNED:
        group = first_key // 4 + tl.arange(0, BLOCK_N // 4)
        r0, r1, r2, r3 = _draw(seed, row[:, None], group[None, :])
        r = tl.join(tl.join(r0, r1), tl.join(r2, r3))  # [., g, a, b] = word 2 b + a
        r = tl.reshape(tl.permute(r, 0, 1, 3, 2), (row.shape[0], BLOCK_N))  # key 4 g + 2 b + a
        return tl.random.uint_to_uniform_float(r) >= p
    else:
        return dropout_keep_each(seed, row[:, None], first_key + tl.arange(0, BLOCK_N)[None, :], p)


@triton.jit
def dropout_mask(OUT, SEED, p, KEYS, BLOCK: tl.constexpr):
    """The keep mask itself, a row of keys per program (for tests that replay the kernel's dropout)."""
    row = tl.program_id(0)
    key = tl.arange(0, BLOCK)
    keep = dropout_keep_each(tl.load(SEED), row, key, p)
    tl.store(OUT + row.to(tl.int64) * KEYS + key, keep.to(tl.int8), mask=key < KEYS)
