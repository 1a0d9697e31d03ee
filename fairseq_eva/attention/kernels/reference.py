"""The reference kernel: EVA's joint softmax query by query, written straight from the contract (contract.py).

Slow (a Python loop over batch rows and queries) and plain: every other kernel is tested against it in float64.
It takes no dropout (the masks are each kernel's own; their tests check them against their own replay).
"""

import torch

from .contract import KernelSpec, register


def visible_keys(layout, n, length, num_chunks, chunk_ok_row=None):
    """(local key positions, visible summary indices) of query n in a row of `length` real tokens."""
    block = n // layout.window
    first = block * layout.window + layout.offset
    local = [m for m in range(first, first + layout.width) if 0 <= m < length and not (layout.causal and m > n)]
    chunks = [c for c in range(layout.visible_chunks(block, num_chunks)) if chunk_ok_row is None or bool(chunk_ok_row[c])]
    return local, chunks


def reference_attention(*, layout, q, k, v, k_summary, beta, chunk_ok, rpe, lengths, dropout, seed, scale):
    """(y, lse) of the contract, one query at a time; differentiable by autograd."""
    if dropout > 0:
        raise ValueError("the reference kernel takes no attention dropout")
    B, H, N, d = q.shape
    C = 0 if k_summary is None else k_summary.size(2)
    first_offset = layout.offset - layout.window + 1  # the relative offset of rpe[:, 0]
    rows, lses = [], []
    for b in range(B):
        length = N if lengths is None else int(lengths[b])
        ys, ls = [], []
        for n in range(N):
            local, chunks = visible_keys(layout, n, length, C, None if chunk_ok is None else chunk_ok[b])
            logits = [scale * (k[b][:, local] @ q[b, :, n, :, None]).squeeze(-1)]  # H x |local|
            if rpe is not None and rpe.dim() == 3:  # by place: n's in its block, m's among the block's local keys
                first = n // layout.window * layout.window + layout.offset
                logits[0] = logits[0] + rpe[:, n % layout.window, [m - first for m in local]].to(q.dtype)
            elif rpe is not None:  # by offset
                logits[0] = logits[0] + rpe[:, [m - n - first_offset for m in local]].to(q.dtype)
            values = [v[b][:, local]]
            if chunks:
                logits.append(scale * (k_summary[b][:, chunks] @ q[b, :, n, :, None]).squeeze(-1))
                values.append(beta[b][:, chunks])
            logits, values = torch.cat(logits, -1), torch.cat(values, 1)  # H x K, H x K x d
            if logits.size(-1) == 0:  # a query that sees nothing returns zeros
                ys.append(q.new_zeros(H, d))
                ls.append(q.new_full((H,), float("-inf")))
                continue
            ys.append((torch.softmax(logits, -1)[..., None] * values).sum(1))
            ls.append(torch.logsumexp(logits, -1))
        rows.append(torch.stack(ys, 1))
        lses.append(torch.stack(ls, 1))
    return torch.stack(rows), torch.stack(lses).to(torch.promote_types(q.dtype, torch.float32))


REFERENCE = register(KernelSpec(
    name="reference",
    run=reference_attention,
    devices=frozenset({"cpu", "cuda"}),
    dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64}),
    dropout=False,
    summary="the contract query by query (slow): what the tests check every kernel against",
))
