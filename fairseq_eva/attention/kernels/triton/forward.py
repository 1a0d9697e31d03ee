"""The forward program: one per (query tile, batch x head), FlashAttention-2 style.

A query tile is BLOCK_M queries of one block of the layout. It runs an online softmax (base 2, float32) over
tiles of BLOCK_N keys: its local keys [b w + offset, b w + offset + width) clipped to the sequence, the row's
length and (causal) the tile's last query, with the RPE added; then the chunk summaries the block sees (the
staircase bound when causal), masked by chunk_ok. It writes y and the natural log-sum-exp; nothing of size
N x keys is stored. Dropout (Z on local and chunk weights alike) multiplies the weights after the
normaliser has summed them, so lse is that of the logits before dropout.
"""

import triton
import triton.language as tl

from .tiles import LN2, dropout_keep, local_keys, local_logits, visible_chunks


@triton.jit
def _online_step(s, m_i, l_i):
    """One key tile of the online softmax: (p, the factor old sums are rescaled by, new max, new sum).
    A row that has seen only hidden keys (-inf) keeps max -inf and sum 0, without NaN."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def eva_forward(
    Q, K, V, KS, BETA, OK, RPE, LENGTHS, SEED, Y, LSE,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, ssb, ssh, ssn, sbb, sbh, sbn, syb, syh, syn,
    H, N, C, d, p_drop, scale_log2,
    WINDOW: tl.constexpr, OFFSET: tl.constexpr, WIDTH: tl.constexpr, CAUSAL: tl.constexpr, OVERLAP: tl.constexpr,
    CHUNKS_PER_BLOCK: tl.constexpr, NUM_OFFSETS: tl.constexpr, HAS_RPE: tl.constexpr, HAS_OK: tl.constexpr,
    DROPOUT: tl.constexpr, ALIGNED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    TILES: tl.constexpr = (WINDOW + BLOCK_M - 1) // BLOCK_M
    block = tl.program_id(0) // TILES
    first_query = (tl.program_id(0) % TILES) * BLOCK_M
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # b * (batch stride) may pass 2^31
    h = bh % H
    i = first_query + tl.arange(0, BLOCK_M)  # block-relative query index
    query_ok = i < WINDOW
    n = block * WINDOW + i
    row = bh.to(tl.int64) * N + n  # the dropout row
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < d
    rows_mask = query_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + b * sqb + h * sqh + n[:, None] * sqn + dd[None, :], mask=rows_mask, other=0.0)
    length = tl.load(LENGTHS + b)
    seed = tl.load(SEED)  # on the device: no host synchronisation for a fresh seed
    rpe = RPE + h * NUM_OFFSETS

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # local keys: column j of the block is position first_key + j
    first_key, lo, hi = local_keys(block, first_query, length, WINDOW, OFFSET, WIDTH, CAUSAL, BLOCK_M)
    for start in range(lo, hi, BLOCK_N):
        m = start + tl.arange(0, BLOCK_N)
        key_ok = m < hi
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k = tl.load(K + b * skb + h * skh + m[:, None] * skn + dd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + b * svb + h * svh + m[:, None] * svn + dd[None, :], mask=kv_mask, other=0.0)
        j = m - first_key
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
        s = local_logits(qk, i[:, None], j[None, :], rpe, scale_log2, WINDOW, NUM_OFFSETS, HAS_RPE)
        seen = query_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            seen &= m[None, :] <= n[:, None]
        s = tl.where(seen, s, float("-inf"))
        p, alpha, m_i, l_i = _online_step(s, m_i, l_i)
        if DROPOUT:
            p = tl.where(dropout_keep(seed, row, start - first_key, p_drop, BLOCK_N, ALIGNED), p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")

    # chunk summaries: the first `visible` of them, minus those chunk_ok hides
    visible = visible_chunks(block, C, CAUSAL, OVERLAP, CHUNKS_PER_BLOCK)
    for start in range(0, visible, BLOCK_N):
        c = start + tl.arange(0, BLOCK_N)
        chunk_ok = c < visible
        if HAS_OK:
            chunk_ok &= tl.load(OK + b * C + c, mask=chunk_ok, other=0) != 0
        kv_mask = chunk_ok[:, None] & d_ok[None, :]
        ks = tl.load(KS + b * ssb + h * ssh + c[:, None] * ssn + dd[None, :], mask=kv_mask, other=0.0)
        beta = tl.load(BETA + b * sbb + h * sbh + c[:, None] * sbn + dd[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(ks), input_precision="ieee") * scale_log2
        s = tl.where(query_ok[:, None] & chunk_ok[None, :], s, float("-inf"))
        p, alpha, m_i, l_i = _online_step(s, m_i, l_i)
        if DROPOUT:
            p = tl.where(dropout_keep(seed, row, WIDTH + start, p_drop, BLOCK_N, ALIGNED), p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(beta.dtype), beta, input_precision="ieee")

    seen_any = l_i > 0
    y = acc / tl.where(seen_any, l_i, 1.0)[:, None]
    if DROPOUT:
        y = y / (1.0 - p_drop)
    lse = tl.where(seen_any, (m_i + tl.log2(tl.where(seen_any, l_i, 1.0))) * LN2, 0.0)  # 0: a query that sees nothing
    tl.store(Y + b * syb + h * syh + n[:, None] * syn + dd[None, :], y.to(Y.dtype.element_ty), mask=rows_mask)
    tl.store(LSE + bh.to(tl.int64) * N + n, lse, mask=query_ok)
