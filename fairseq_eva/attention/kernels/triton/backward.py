"""The backward programs. Each recomputes the weights it needs from q, k and the saved lse,
P = exp(s - lse), and with delta = rowsum(dY * Y) (= rowsum(P * Z * dP)) forms dS = P * (Z * dP - delta),
dP = dY [v ; beta]^T. Every gradient is owned by one program, so no float atomics: the result is
deterministic.

- eva_backward_dq: per (query tile, batch x head), the forward's loop: delta (stored for the others) and dQ.
- eva_backward_dkdv: per (key tile, batch x head): dK, dV, looping over the query blocks whose local keys
  hold the tile (one block, two or three with overlap).
- eva_backward_dsummary: per (summary tile, batch x head, split): d k~, d beta over the query blocks that see
  the tile, blocks split round-robin into partial sums that torch adds.
- eva_backward_dgrid: per (query tile x key tile of a block, head, split): dS summed over batch rows and
  blocks, the bias gradient per (query i, local column j); torch maps it onto the RPE table's offsets.
"""

import triton
import triton.language as tl

from .tiles import LOG2E, autotuned, dropout_keep, local_keys, local_logits, local_tile, query_tile, summary_tile, visible_chunks


@triton.jit
def _query_tile(Q, DY, LSE, DELTA, b, h, bh, n, query_ok, dd, d_ok, sqb, sqh, sqn, sgb, sgh, sgn, N):
    """q, dY, lse (base 2) and delta of a tile of queries n."""
    mask = query_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + b * sqb + h * sqh + n[:, None] * sqn + dd[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + b * sgb + h * sgh + n[:, None] * sgn + dd[None, :], mask=mask, other=0.0)
    lse = tl.load(LSE + bh.to(tl.int64) * N + n, mask=query_ok, other=0.0) * LOG2E
    delta = tl.load(DELTA + bh.to(tl.int64) * N + n, mask=query_ok, other=0.0)
    return q, dy, lse, delta


@triton.jit
def _weights_and_grad(s, seen, lse, delta, dp, keep, p_drop, DROPOUT: tl.constexpr):
    """(Z P, dS) of a tile (any orientation: lse and delta broadcast already) from its base-2 logits s."""
    p = tl.exp2(tl.where(seen, s, float("-inf")) - lse)
    if DROPOUT:
        p_kept = tl.where(keep, p / (1.0 - p_drop), 0.0)
        dp = tl.where(keep, dp / (1.0 - p_drop), 0.0)
    else:
        p_kept = p
    return p_kept, p * (dp - delta)


@triton.jit
def eva_backward_dq(
    Q, K, V, KS, BETA, OK, RPE, LENGTHS, SEED, Y, DY, LSE, DELTA, DQ,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, ssb, ssh, ssn, sbb, sbh, sbn, syb, syh, syn, sgb, sgh, sgn,
    sdqb, sdqh, sdqn,
    H, N, C, d, p_drop, scale, scale_log2,
    WINDOW: tl.constexpr, OFFSET: tl.constexpr, WIDTH: tl.constexpr, CAUSAL: tl.constexpr, OVERLAP: tl.constexpr,
    CHUNKS_PER_BLOCK: tl.constexpr, NUM_OFFSETS: tl.constexpr, HAS_RPE: tl.constexpr, HAS_OK: tl.constexpr,
    DROPOUT: tl.constexpr, ALIGNED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    block, first_query, bh, b, h, i, query_ok, n, row, dd, d_ok, q = query_tile(Q, sqb, sqh, sqn, H, N, d, WINDOW,
                                                                              BLOCK_M, BLOCK_D)
    seed = tl.load(SEED)  # on the device: no host synchronisation for a fresh seed
    mask = query_ok[:, None] & d_ok[None, :]
    y = tl.load(Y + b * syb + h * syh + n[:, None] * syn + dd[None, :], mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + b * sgb + h * sgh + n[:, None] * sgn + dd[None, :], mask=mask, other=0.0)
    lse = tl.load(LSE + row, mask=query_ok, other=0.0) * LOG2E
    delta = tl.sum(y * dy.to(tl.float32), 1)
    tl.store(DELTA + row, delta, mask=query_ok)  # for the programs that run after this one
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    first_key, lo, hi = local_keys(block, first_query, tl.load(LENGTHS + b), WINDOW, OFFSET, WIDTH, CAUSAL, BLOCK_M)
    for start in range(lo, hi, BLOCK_N):
        k, v, s, seen, keep = local_tile(q, K + b * skb + h * skh, V + b * svb + h * svh, skn, svn, start, hi, first_key,
                                         i, query_ok, n, row, dd, d_ok, RPE + h * NUM_OFFSETS, scale_log2, seed, p_drop,
                                         WINDOW, NUM_OFFSETS, HAS_RPE, CAUSAL, DROPOUT, ALIGNED, BLOCK_N)
        dp = tl.dot(dy, tl.trans(v), input_precision="ieee")
        _, ds = _weights_and_grad(s, seen, lse[:, None], delta[:, None], dp, keep, p_drop, DROPOUT)
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")

    visible = visible_chunks(block, C, CAUSAL, OVERLAP, CHUNKS_PER_BLOCK)
    for start in range(0, visible, BLOCK_N):
        ks, beta, s, seen, keep = summary_tile(q, KS + b * ssb + h * ssh, BETA + b * sbb + h * sbh, OK + b * C, ssn, sbn,
                                               start, visible, query_ok, row, dd, d_ok, scale_log2, seed, p_drop,
                                               WIDTH, HAS_OK, DROPOUT, ALIGNED, BLOCK_N)
        dp = tl.dot(dy, tl.trans(beta), input_precision="ieee")
        _, ds = _weights_and_grad(s, seen, lse[:, None], delta[:, None], dp, keep, p_drop, DROPOUT)
        dq += tl.dot(ds.to(ks.dtype), ks, input_precision="ieee")

    tl.store(DQ + b * sdqb + h * sdqh + n[:, None] * sdqn + dd[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=mask)


@triton.jit
def eva_backward_dkdv(
    Q, K, V, RPE, LENGTHS, SEED, DY, LSE, DELTA, DK, DV,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sgb, sgh, sgn, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn,
    H, N, d, p_drop, scale, scale_log2,
    WINDOW: tl.constexpr, OFFSET: tl.constexpr, WIDTH: tl.constexpr, CAUSAL: tl.constexpr,
    NUM_OFFSETS: tl.constexpr, HAS_RPE: tl.constexpr, DROPOUT: tl.constexpr, ALIGNED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    first = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # b * (batch stride) may pass 2^31
    h = bh % H
    seed = tl.load(SEED)  # on the device: no host synchronisation for a fresh seed
    m = first + tl.arange(0, BLOCK_N)
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < d
    length = tl.load(LENGTHS + b)
    key_ok = m < length
    kv_mask = (m < N)[:, None] & d_ok[None, :]
    k = tl.load(K + b * skb + h * skh + m[:, None] * skn + dd[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + b * svb + h * svh + m[:, None] * svn + dd[None, :], mask=kv_mask, other=0.0)
    rpe = RPE + h * NUM_OFFSETS
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    # block b's local keys are [b w + offset, b w + offset + width): the blocks that hold a key of this tile
    first_block = tl.maximum(first - OFFSET - WIDTH + 1, 0) // WINDOW
    last_block = tl.minimum((first + BLOCK_N - 1 - OFFSET) // WINDOW, N // WINDOW - 1)
    for block in range(first_block, last_block + 1):
        j = m - (block * WINDOW + OFFSET)
        column_ok = key_ok & (j >= 0) & (j < WIDTH)
        first_query = 0
        if CAUSAL:  # query tiles wholly before the key tile see none of it
            first_query = (tl.maximum(first - block * WINDOW, 0) // BLOCK_M) * BLOCK_M
        for start in range(first_query, WINDOW, BLOCK_M):
            i = start + tl.arange(0, BLOCK_M)
            query_ok = i < WINDOW
            n = block * WINDOW + i
            q, dy, lse, delta = _query_tile(Q, DY, LSE, DELTA, b, h, bh, n, query_ok, dd, d_ok, sqb, sqh, sqn, sgb, sgh, sgn, N)
            # transposed tiles: keys x queries
            s = local_logits(tl.dot(k, tl.trans(q), input_precision="ieee"), i[None, :], j[:, None], rpe, scale_log2,
                             WINDOW, NUM_OFFSETS, HAS_RPE)
            seen = column_ok[:, None] & query_ok[None, :]
            if CAUSAL:
                seen &= m[:, None] <= n[None, :]
            keep = seen
            if DROPOUT:  # drawn queries x keys, as every program draws it
                keep = tl.trans(dropout_keep(seed, bh.to(tl.int64) * N + n, first - block * WINDOW - OFFSET, p_drop, BLOCK_N,
                                             ALIGNED))
            dp = tl.dot(v, tl.trans(dy), input_precision="ieee")
            p_kept, ds = _weights_and_grad(s, seen, lse[None, :], delta[None, :], dp, keep, p_drop, DROPOUT)
            dv += tl.dot(p_kept.to(dy.dtype), dy, input_precision="ieee")
            dk += tl.dot(ds.to(q.dtype), q, input_precision="ieee")

    tl.store(DK + b * sdkb + h * sdkh + m[:, None] * sdkn + dd[None, :], (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + b * sdvb + h * sdvh + m[:, None] * sdvn + dd[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def eva_backward_dsummary(
    Q, KS, BETA, OK, SEED, DY, LSE, DELTA, DKS, DBETA,
    sqb, sqh, sqn, ssb, ssh, ssn, sbb, sbh, sbn, sgb, sgh, sgn,
    B, H, N, C, d, p_drop, scale, scale_log2,
    WINDOW: tl.constexpr, WIDTH: tl.constexpr, CAUSAL: tl.constexpr, OVERLAP: tl.constexpr,
    CHUNKS_PER_BLOCK: tl.constexpr, HAS_OK: tl.constexpr, DROPOUT: tl.constexpr, ALIGNED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    first = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    split = tl.program_id(2)
    splits = tl.num_programs(2)
    b = (bh // H).to(tl.int64)  # b * (batch stride) may pass 2^31
    h = bh % H
    seed = tl.load(SEED)  # on the device: no host synchronisation for a fresh seed
    c = first + tl.arange(0, BLOCK_N)
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < d
    chunk_ok = c < C
    kv_mask = chunk_ok[:, None] & d_ok[None, :]
    if HAS_OK:
        chunk_ok &= tl.load(OK + b * C + c, mask=chunk_ok, other=0) != 0
    ks = tl.load(KS + b * ssb + h * ssh + c[:, None] * ssn + dd[None, :], mask=kv_mask, other=0.0)
    beta = tl.load(BETA + b * sbb + h * sbh + c[:, None] * sbn + dd[None, :], mask=kv_mask, other=0.0)
    dks = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dbeta = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    first_block = 0
    if CAUSAL:  # block b sees (b - overlap) * chunks_per_block summaries: the first block that sees summary `first`
        first_block = N // WINDOW
        if CHUNKS_PER_BLOCK > 0:
            first_block = first // CHUNKS_PER_BLOCK + OVERLAP + 1
    for block in range(first_block + split, N // WINDOW, splits):
        seen_chunk = chunk_ok & (c < visible_chunks(block, C, CAUSAL, OVERLAP, CHUNKS_PER_BLOCK))
        for start in range(0, WINDOW, BLOCK_M):
            i = start + tl.arange(0, BLOCK_M)
            query_ok = i < WINDOW
            n = block * WINDOW + i
            q, dy, lse, delta = _query_tile(Q, DY, LSE, DELTA, b, h, bh, n, query_ok, dd, d_ok, sqb, sqh, sqn, sgb, sgh, sgn, N)
            s = tl.dot(ks, tl.trans(q), input_precision="ieee") * scale_log2
            seen = seen_chunk[:, None] & query_ok[None, :]
            keep = seen
            if DROPOUT:  # drawn queries x summaries, as every program draws it
                keep = tl.trans(dropout_keep(seed, bh.to(tl.int64) * N + n, WIDTH + first, p_drop, BLOCK_N, ALIGNED))
            dp = tl.dot(beta, tl.trans(dy), input_precision="ieee")
            p_kept, ds = _weights_and_grad(s, seen, lse[None, :], delta[None, :], dp, keep, p_drop, DROPOUT)
            dbeta += tl.dot(p_kept.to(dy.dtype), dy, input_precision="ieee")
            dks += tl.dot(ds.to(q.dtype), q, input_precision="ieee")

    out = split.to(tl.int64) * B * H * C * d + bh.to(tl.int64) * C * d + c[:, None] * d + dd[None, :]  # splits x B x H x C x d
    tl.store(DKS + out, dks * scale, mask=kv_mask)
    tl.store(DBETA + out, dbeta, mask=kv_mask)


@triton.jit
def eva_backward_dgrid(
    Q, K, V, RPE, LENGTHS, SEED, DY, LSE, DELTA, DGRID,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, sgb, sgh, sgn,
    B, H, N, d, p_drop, scale_log2,
    WINDOW: tl.constexpr, OFFSET: tl.constexpr, WIDTH: tl.constexpr, CAUSAL: tl.constexpr,
    NUM_OFFSETS: tl.constexpr, DROPOUT: tl.constexpr, ALIGNED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    COLUMN_TILES: tl.constexpr = (WIDTH + BLOCK_N - 1) // BLOCK_N
    i = (tl.program_id(0) // COLUMN_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)
    j = (tl.program_id(0) % COLUMN_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    h = tl.program_id(1)
    split = tl.program_id(2)
    splits = tl.num_programs(2)
    seed = tl.load(SEED)
    query_ok = i < WINDOW
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < d
    rpe = RPE + h * NUM_OFFSETS
    blocks = N // WINDOW
    dgrid = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for task in range(split, B * blocks, splits):  # every (batch row, block) once over the splits
        b = (task // blocks).to(tl.int64)
        block = task % blocks
        bh = b * H + h
        n = block * WINDOW + i
        m = block * WINDOW + OFFSET + j
        key_ok = (m >= 0) & (m < tl.load(LENGTHS + b)) & (j < WIDTH)
        kv_mask = key_ok[:, None] & d_ok[None, :]
        k = tl.load(K + b * skb + h * skh + m[:, None] * skn + dd[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + b * svb + h * svh + m[:, None] * svn + dd[None, :], mask=kv_mask, other=0.0)
        q, dy, lse, delta = _query_tile(Q, DY, LSE, DELTA, b, h, bh, n, query_ok, dd, d_ok, sqb, sqh, sqn, sgb, sgh, sgn, N)
        s = local_logits(tl.dot(q, tl.trans(k), input_precision="ieee"), i[:, None], j[None, :], rpe, scale_log2,
                         WINDOW, NUM_OFFSETS, True)
        seen = query_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            seen &= m[None, :] <= n[:, None]
        keep = seen
        if DROPOUT:
            keep = dropout_keep(seed, bh * N + n, (tl.program_id(0) % COLUMN_TILES) * BLOCK_N, p_drop, BLOCK_N, ALIGNED)
        dp = tl.dot(dy, tl.trans(v), input_precision="ieee")
        _, ds = _weights_and_grad(s, seen, lse[:, None], delta[:, None], dp, keep, p_drop, DROPOUT)
        dgrid += ds
    out = (split.to(tl.int64) * H + h) * WINDOW * WIDTH + i[:, None] * WIDTH + j[None, :]  # splits x H x w x width
    tl.store(DGRID + out, dgrid, mask=query_ok[:, None] & (j < WIDTH)[None, :])


# the backward programs hold more tiles at once than the forward: 64 x 64 with 4 warps for head size 64 (op.py),
# 128 rows or keys with 8 warps, and 16 query rows, which fit every window
eva_backward_dq_tuned = autotuned(eva_backward_dq, [(64, 64, 4, 2), (128, 64, 8, 2), (16, 64, 4, 2)])
eva_backward_dkdv_tuned = autotuned(eva_backward_dkdv, [(64, 64, 4, 2), (64, 128, 8, 2), (16, 64, 4, 2)])
