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
def query_tile(Q, sqb, sqh, sqn, H, N, d, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """The queries of a program of the forward's grid (program_id 0: block and query tile, 1: batch x head):
    (block, first_query, bh, b, h, i block-relative, query_ok, n, dropout row, dd, d_ok, q)."""
    TILES: tl.constexpr = (WINDOW + BLOCK_M - 1) // BLOCK_M
    block = tl.program_id(0) // TILES
    first_query = (tl.program_id(0) % TILES) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # b * (batch stride) may pass 2^31
    h = bh % H
    i = first_query + tl.arange(0, BLOCK_M)
    query_ok = i < WINDOW
    n = block * WINDOW + i
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < d
    q = tl.load(Q + b * sqb + h * sqh + n[:, None] * sqn + dd[None, :], mask=query_ok[:, None] & d_ok[None, :], other=0.0)
    return block, first_query, bh, b, h, i, query_ok, n, bh.to(tl.int64) * N + n, dd, d_ok, q


@triton.jit
def local_tile(q, K, V, skn, svn, start, hi, first_key, i, query_ok, n, row, dd, d_ok, rpe, scale_log2, seed, p_drop,
               WINDOW: tl.constexpr, NUM_OFFSETS: tl.constexpr, HAS_RPE: tl.constexpr, CAUSAL: tl.constexpr,
               DROPOUT: tl.constexpr, ALIGNED: tl.constexpr, BLOCK_N: tl.constexpr):
    """Local keys [start, start + BLOCK_N) (those before hi) of a query tile, K and V at the row's (b, h):
    (k, v, base-2 logits, which the queries see, the dropout keep mask)."""
    m = start + tl.arange(0, BLOCK_N)
    key_ok = m < hi
    kv_mask = key_ok[:, None] & d_ok[None, :]
    k = tl.load(K + m[:, None] * skn + dd[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + m[:, None] * svn + dd[None, :], mask=kv_mask, other=0.0)
    s = local_logits(tl.dot(q, tl.trans(k), input_precision="ieee"), i[:, None], (m - first_key)[None, :], rpe,
                     scale_log2, WINDOW, NUM_OFFSETS, HAS_RPE)
    seen = query_ok[:, None] & key_ok[None, :]
    if CAUSAL:
        seen &= m[None, :] <= n[:, None]
    keep = seen
    if DROPOUT:
        keep = dropout_keep(seed, row, start - first_key, p_drop, BLOCK_N, ALIGNED)
    return k, v, s, seen, keep


@triton.jit
def summary_tile(q, KS, BETA, OK, ssn, sbn, start, visible, query_ok, row, dd, d_ok, scale_log2, seed, p_drop,
                 WIDTH: tl.constexpr, HAS_OK: tl.constexpr, DROPOUT: tl.constexpr, ALIGNED: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    """Summaries [start, start + BLOCK_N) of the first `visible` (minus those the row's OK hides) for a query tile,
    KS and BETA at the row's (b, h): (k~, beta, base-2 logits, which the queries see, the dropout keep mask)."""
    c = start + tl.arange(0, BLOCK_N)
    chunk_ok = c < visible
    if HAS_OK:
        chunk_ok &= tl.load(OK + c, mask=chunk_ok, other=0) != 0
    kv_mask = chunk_ok[:, None] & d_ok[None, :]
    ks = tl.load(KS + c[:, None] * ssn + dd[None, :], mask=kv_mask, other=0.0)
    beta = tl.load(BETA + c[:, None] * sbn + dd[None, :], mask=kv_mask, other=0.0)
    s = tl.dot(q, tl.trans(ks), input_precision="ieee") * scale_log2
    seen = query_ok[:, None] & chunk_ok[None, :]
    keep = seen
    if DROPOUT:
        keep = dropout_keep(seed, row, WIDTH + start, p_drop, BLOCK_N, ALIGNED)
    return ks, beta, s, seen, keep


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


def fitting_tiles(configs, named_args, **kwargs):
    """The autotune configs worth trying: query tiles no taller than the window (at least 16 rows, the smallest
    tl.dot), as taller ones compute only masked rows."""
    tall = max(16, 1 << max(0, kwargs["WINDOW"] - 1).bit_length())
    return [c for c in configs if c.kwargs["BLOCK_M"] <= tall] or configs[-1:]


def autotuned(program, tiles):
    """program under triton.autotune over tiles (BLOCK_M, BLOCK_N, num_warps, num_stages), keyed by the head size,
    window and layout (and the inputs' dtypes, which Triton adds), results cached on disk across processes."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in tiles]
    return triton.autotune(configs, key=["d", "WINDOW", "OFFSET", "WIDTH", "CAUSAL", "DROPOUT", "HAS_RPE"],
                           prune_configs_by={"early_config_prune": fitting_tiles}, cache_results=True)(program)
