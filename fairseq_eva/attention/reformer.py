"""Reformer's LSH attention (Kitaev, Kaiser, Levskaya 2020), shared-QK, bidirectional.

Keys are the normalised queries, k_j = q_j / |q_j| (no key projection). Each of n_h hash rounds draws a random
R in R^{d x n_b/2} and hashes h(x) = argmax [x R ; -x R] (the paper's angular LSH); it sorts the positions
by (bucket, position), cuts the sorted sequence into chunks of m, and each query attends the keys of its
chunk and of the previous one (paper, section 2): only those of its own bucket (the paper), or all of them
(`attend_across_buckets`, as reformer-pytorch's default). A query never attends itself unless nothing else
is visible to it (shared QK would make q_i.k_i the largest logit). With L_r(i) the log-normaliser and o_r(i)
the output of round r, the rounds are combined as

    o_i = sum_r exp(L_r(i) - logsumexp_r L_r(i)) o_r(i).

Bidirectional only: Reformer's causal mask exists, but the chunk a query falls in depends on how many later
tokens hash to lower buckets, so a future token can change a past output.

The rotations are drawn per head and round, shared by the batch: afresh at every training forward from torch's
global generator, and fixed at evaluation (the buffer `rotations`, saved with the model), so that evaluation
is deterministic (reformer-pytorch redraws them at every call). Each row is hashed and chunked from its own
real tokens only: pads take a bucket after every real one and are never attended. The number of buckets is
`num_buckets`, or, when 0 (default), each row's L / m rounded to an even number (at least 2, at most 2 d with
d the head dimension: the rotations buffer has d columns): the average bucket then holds about a chunk, and
a row's hashing does not depend on the batch. A chunk size above the batch's length N lays out one chunk of N,
which computes what the longer chunk would (its other slots are empty) at the cost of N. Not implemented: the
paper's optional correction for keys attended in several rounds (subtracting the log of their count), reformer-pytorch's
wrap-around look-back (here the first chunk sees only itself), and reversible layers (a memory saving outside the
attention).
"""

import math

import torch
import torch.nn.functional as F

from .base import ProjectedAttention
from .layout import lowest
from .mechanism import BIDIRECTIONAL, Mechanism, Memory, Option


def bucket_counts(lengths, chunk_size, num_buckets, max_buckets):
    """Per row (B,), the number of buckets: num_buckets, or each row's L / m rounded to an even number in
    [2, max_buckets]."""
    if num_buckets:
        return torch.full_like(lengths, num_buckets)
    return ((lengths + chunk_size).div(2 * chunk_size, rounding_mode="floor") * 2).clamp(2, max_buckets)


def lsh_buckets(x, rotations, half):
    """Angular LSH of x (B x H x N x d) for each round: argmax [x R ; -x R] over the first half[b] columns of
    the rotations (H x n_h x d x c), in [0, 2 half[b]); B x H x n_h x N."""
    columns = int(half.max())
    rotated = torch.einsum("bhnd,hrdc->bhrnc", x, rotations[..., :columns])
    unused = (torch.arange(columns, device=x.device) >= half[:, None])[:, None, None, None, :]  # B x 1 x 1 x 1 x c
    signed = torch.cat([rotated.masked_fill(unused, float("-inf")), (-rotated).masked_fill(unused, float("-inf"))], -1)
    index = signed.argmax(-1)
    # index c >= columns stands for -x R[:, c - columns]: bucket half + c - columns
    return torch.where(index < columns, index, index - columns + half[:, None, None, None])


def _previous_chunk(t, fill):
    """t: B x H x n_h x C x m (x d): each chunk's predecessor, the first chunk's `fill`."""
    return torch.cat([torch.full_like(t[:, :, :, :1], fill), t[:, :, :, :-1]], 3)


class ReformerAttention(ProjectedAttention):
    """Shared-QK LSH attention: n_h rounds of hashing, sorting and chunked attention, combined by their
    normalisers."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, num_hashes=4, chunk_size=64, num_buckets=0,
                 attend_across_buckets=False):
        for name, value in (("num_hashes", num_hashes), ("chunk_size", chunk_size)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(num_buckets, int) or num_buckets < 0 or num_buckets % 2:
            raise ValueError(f"num_buckets must be 0 (L / chunk_size per row) or a positive even integer, "
                             f"got {num_buckets!r}")
        if causal:
            raise ValueError("reformer attention is bidirectional only (a future token can move a past query "
                             "to another chunk)")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout, projections=("q", "v"))
        self.num_hashes, self.chunk_size, self.num_buckets = num_hashes, chunk_size, num_buckets
        self.attend_across_buckets = attend_across_buckets
        columns = num_buckets // 2 if num_buckets else self.head_dim
        # the evaluation rotations (training draws new ones of this shape at every forward)
        self.register_buffer("rotations", torch.randn(num_heads, num_hashes, self.head_dim, columns))

    def extra_repr(self):
        return (f"num_hashes={self.num_hashes}, chunk_size={self.chunk_size}, num_buckets={self.num_buckets}, "
                f"attend_across_buckets={self.attend_across_buckets}")

    def draw_rotations(self, like):
        if not self.training:
            return self.rotations.to(like.dtype)
        return torch.randn(self.rotations.shape, device=like.device, dtype=like.dtype)

    def attend(self, x, q, k, v, lengths):
        B, H, N, d = q.shape
        R = self.num_hashes
        if lengths is None:
            lengths = torch.full((B,), N, device=q.device)
        lengths = lengths.long()
        half = bucket_counts(lengths, self.chunk_size, self.num_buckets, 2 * self.rotations.size(-1)) // 2
        m = min(self.chunk_size, N)  # a chunk longer than the batch would be padded with slots that are never seen
        k = F.normalize(q, dim=-1)
        buckets = lsh_buckets(k, self.draw_rotations(q), half)  # B x H x R x N
        real = torch.arange(N, device=q.device) < lengths[:, None]  # B x N
        buckets = buckets.masked_fill(~real[:, None, None, :], 2 * int(half.max()))
        order = (buckets * N + torch.arange(N, device=q.device)).argsort(-1)  # sorted by (bucket, position)

        # the sorted positions, padded to C chunks of m with a dummy position N (never attended)
        C = -(-N // m)
        slots = torch.cat([order, order.new_full((B, H, R, C * m - N), N)], -1)  # B x H x R x C m
        buckets = F.pad(buckets, (0, 1), value=-1).gather(-1, slots).view(B, H, R, C, m)

        def sort(t):  # B x H x N x d -> B x H x R x C x m x d, in each round's sorted order
            t = F.pad(t, (0, 0, 0, 1)).unsqueeze(2).expand(B, H, R, N + 1, d)
            return t.gather(3, slots[..., None].expand(B, H, R, C * m, d)).view(B, H, R, C, m, d)

        sq, sk, sv = sort(q), sort(k), sort(v)
        positions = slots.view(B, H, R, C, m)
        # each chunk's keys: the previous chunk's, then its own (2 m)
        ck = torch.cat([_previous_chunk(sk, 0), sk], -2)
        cv = torch.cat([_previous_chunk(sv, 0), sv], -2)
        cpos = torch.cat([_previous_chunk(positions, N), positions], -1)
        cbuckets = torch.cat([_previous_chunk(buckets, -1), buckets], -1)

        visible = cpos < lengths[:, None, None, None, None]  # B x H x R x C x 2m (pads and dummies: no)
        visible = visible.unsqueeze(-2).expand(B, H, R, C, m, 2 * m)
        if not self.attend_across_buckets:
            visible = visible & (cbuckets.unsqueeze(-2) == buckets.unsqueeze(-1))
        itself = cpos.unsqueeze(-2) == positions.unsqueeze(-1)
        others = visible & ~itself
        visible = others | (visible & itself & ~others.any(-1, keepdim=True))

        logits = (sq @ ck.transpose(-1, -2)) * self.scale
        logits = logits.masked_fill(~visible, lowest(logits.dtype))
        log_norm = logits.logsumexp(-1)  # B x H x R x C x m
        p = torch.exp(logits - log_norm.unsqueeze(-1))
        out = self.dropout(p) @ cv  # B x H x R x C x m x d

        # back to the positions' order, then the rounds combined by their normalisers
        out = out.view(B, H, R, C * m, d)[..., :N, :]
        log_norm = log_norm.view(B, H, R, C * m)[..., :N]
        out = torch.zeros_like(out).scatter(3, order[..., None].expand(B, H, R, N, d), out)
        log_norm = torch.zeros_like(log_norm).scatter(3, order, log_norm)
        weights = torch.softmax(log_norm, dim=2)
        return (weights.unsqueeze(-1) * out).sum(2)


def reference(q, v, rotations, chunk_size, num_buckets=0, attend_across_buckets=False, real=None):
    """Per-query float64 LSH attention with the given rotations (H x n_h x d x c): q, v B x H x N x d, pads
    anywhere (real: B x N, True at real tokens); each row hashed, sorted and chunked over its real tokens."""
    q, v, rotations = (t.double() for t in (q, v, rotations))
    B, H, N, d = q.shape
    m = chunk_size
    out = torch.zeros_like(q)
    for b in range(B):
        positions = [n for n in range(N) if real is None or bool(real[b, n])]
        L = len(positions)
        n_b = num_buckets or min(max(2, 2 * int(L / (2 * m) + 0.5)), 2 * rotations.size(-1))
        for h in range(H):
            keys = {n: q[b, h, n] / q[b, h, n].norm() for n in positions}
            rounds = {n: [] for n in positions}
            for r in range(rotations.size(1)):
                Rr = rotations[h, r, :, : n_b // 2]
                bucket = {n: int(torch.cat([keys[n] @ Rr, -(keys[n] @ Rr)]).argmax()) for n in positions}
                ranked = sorted(positions, key=lambda n: (bucket[n], n))
                for slot, i in enumerate(ranked):
                    chunk = slot // m
                    seen = ranked[max(0, chunk - 1) * m : (chunk + 1) * m]
                    seen = [j for j in seen if attend_across_buckets or bucket[j] == bucket[i]]
                    targets = [j for j in seen if j != i] or [i]
                    logits = torch.stack([q[b, h, i] @ keys[j] for j in targets]) / math.sqrt(d)
                    weights = torch.softmax(logits, 0)
                    rounds[i].append((torch.logsumexp(logits, 0), sum(w * v[b, h, j] for w, j in zip(weights, targets))))
            for i in positions:
                log_norms = torch.stack([lr for lr, _ in rounds[i]])
                out[b, h, i] = sum(torch.exp(lr - torch.logsumexp(log_norms, 0)) * o for lr, o in rounds[i])
    return out


def reformer_cost(N, embed_dim, num_heads, causal=False, num_hashes=4, chunk_size=64, num_buckets=0, **_):
    """4 n_h m D + n_h (n_b / 2) D. Per round, q.k and p v over the 2 m keys of two chunks (4 m D), and the
    hash x R (n_b / 2 per head dimension); n_b = N / m rounded to an even number when num_buckets is 0. The
    sort (n_h N log N comparisons per head) is not counted."""
    head_dim = embed_dim // num_heads
    n_b = num_buckets or min(max(2, 2 * int(N / (2 * chunk_size) + 0.5)), 2 * head_dim)
    return num_hashes * (4 * chunk_size + n_b / 2) * embed_dim


MECHANISMS = (
    Mechanism(
        "reformer", ".reformer:ReformerAttention", (BIDIRECTIONAL,),
        (Option("num_hashes", int, 4, "number n_h of hash rounds (the paper's masked LM: 4)"),
         Option("chunk_size", int, 64, "chunk size m of the sorted sequence: a query attends its chunk and the "
                                       "previous one (the paper's masked LM: 64)"),
         Option("num_buckets", int, 0, "number of hash buckets, even; 0: each row's length / chunk_size rounded "
                                       "to an even number (the paper does not state it)"),
         Option("attend_across_buckets", bool, False, "attend every key of the two chunks, not only those of "
                                                     "the query's bucket (Reformer: no; reformer-pytorch: yes)")),
        reformer_cost,
        "Reformer: shared-QK LSH attention within sorted chunks, several hash rounds",
        title="Reformer", knob="chunk_size",
        # the logits of every round's chunks, and the hashing: every token rotated onto num_buckets / 2 columns
        # (d without num_buckets), then those and their negatives
        memory=Memory(("num_hashes", "num_buckets"), lambda B, N, H, d, o: B * H * o["num_hashes"] * N * (
            2 * min(N, o["chunk_size"]) + 3 * (o["num_buckets"] // 2 or d)), 4)),
)
