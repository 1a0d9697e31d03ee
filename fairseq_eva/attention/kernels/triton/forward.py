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

from .tiles import LN2, autotuned, local_keys, local_tile, query_tile, summary_tile, visible_chunks


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
    block, first_query, bh, b, h, i, query_ok, n, row, dd, d_ok, q = query_tile(Q, sqb, sqh, sqn, H, N, d, WINDOW,
                                                                              BLOCK_M, BLOCK_D)
    seed = tl.load(SEED)  # on the device: no host synchronisation for a fresh seed
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    first_key, lo, hi = local_keys(block, first_query, tl.load(LENGTHS + b), WINDOW, OFFSET, WIDTH, CAUSAL, BLOCK_M)
    for start in range(lo, hi, BLOCK_N):
        _, v, s, seen, keep = local_tile(q, K + b * skb + h * skh, V + b * svb + h * svh, skn, svn, start, hi, first_key,
                                         i, query_ok, n, row, dd, d_ok, RPE + h * NUM_OFFSETS, scale_log2, seed, p_drop,
                                         WINDOW, NUM_OFFSETS, HAS_RPE, CAUSAL, DROPOUT, ALIGNED, BLOCK_N)
        p, alpha, m_i, l_i = _online_step(tl.where(seen, s, float("-inf")), m_i, l_i)
        if DROPOUT:
            p = tl.where(keep, p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")

    visible = visible_chunks(block, C, CAUSAL, OVERLAP, CHUNKS_PER_BLOCK)
    for start in range(0, visible, BLOCK_N):
        _, beta, s, seen, keep = summary_tile(q, KS + b * ssb + h * ssh, BETA + b * sbb + h * sbh, OK + b * C, ssn, sbn,
                                              start, visible, query_ok, row, dd, d_ok, scale_log2, seed, p_drop,
                                              WIDTH, HAS_OK, DROPOUT, ALIGNED, BLOCK_N)
        p, alpha, m_i, l_i = _online_step(tl.where(seen, s, float("-inf")), m_i, l_i)
        if DROPOUT:
            p = tl.where(keep, p, 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(beta.dtype), beta, input_precision="ieee")

    seen_any = l_i > 0
    y = acc / tl.where(seen_any, l_i, 1.0)[:, None]
    if DROPOUT:
        y = y / (1.0 - p_drop)
    lse = tl.where(seen_any, (m_i + tl.log2(tl.where(seen_any, l_i, 1.0))) * LN2, 0.0)  # 0: a query that sees nothing
    rows_mask = query_ok[:, None] & d_ok[None, :]
    tl.store(Y + b * syb + h * syh + n[:, None] * syn + dd[None, :], y.to(Y.dtype.element_ty), mask=rows_mask)
    tl.store(LSE + row, lse, mask=query_ok)


# FlashAttention-2's Triton forward takes 128 x 64 with 4 warps for head size 64; 64 rows for float32 (whose
# 128-row tiles may not fit in shared memory) and larger heads; the last fits every window.
eva_forward_tuned = autotuned(eva_forward, [(128, 64, 4, 3), (64, 64, 4, 3), (16, 64, 4, 2)])
