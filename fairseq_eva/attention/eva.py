"""EVA attention (Zheng, Yuan, Wang, Kong, ICLR 2023) in plain PyTorch, multi-head, self-attention.

Each query n attends, in one softmax, to the keys of its local set E^n (exactly) and to one key
summary k~_c per visible chunk, whose value is the chunk's importance-sampled summary beta_c
(DESIGN section 2, the paper's Eq. 13 and Algorithms 1-2).

All queries of a block share their candidate set (up to causal order inside the block), so the
whole layer is one batched attention over blocks: scores of shape blocks x w x (w' + C), never N x N.
"""

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .chunks import PROPOSALS, ChunkSummaries, upcast
from .relative_position import RelativePositionBias

Cache = Dict[str, Tensor]


def check_options(embed_dim, num_heads, causal, window_size, overlap, num_chunks, chunk_size, proposal, dropout):
    """Raise a ValueError that names the first bad option."""

    def need(ok, message):
        if not ok:
            raise ValueError(message)

    for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
        need(isinstance(value, int) and value > 0, f"{name} must be a positive integer, got {value!r}")
    need(embed_dim % num_heads == 0, f"num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    for name, value in (("window_size", window_size), ("num_chunks", num_chunks), ("chunk_size", chunk_size)):
        need(isinstance(value, int) and value >= 0, f"{name} must be an integer >= 0, got {value!r}")
    need(not (num_chunks and chunk_size), f"set num_chunks ({num_chunks}) or chunk_size ({chunk_size}), not both")
    need(0.0 <= dropout < 1.0, f"dropout must be in [0, 1), got {dropout!r}")
    need(proposal in PROPOSALS, f"proposal must be one of {', '.join(PROPOSALS)}; got {proposal!r}")
    if causal:
        need(window_size >= 1, f"window_size must be at least 1 in causal EVA, got {window_size}")
        need(num_chunks == 0, "num_chunks is for bidirectional EVA; causal EVA takes chunk_size")
        need(
            chunk_size == 0 or window_size % chunk_size == 0,
            f"chunk_size ({chunk_size}) must divide window_size ({window_size}) in causal EVA",
        )
    else:
        need(window_size > 0 or num_chunks or chunk_size, "window_size 0 needs chunks: set num_chunks or chunk_size")
        need(not overlap or (window_size > 0 and window_size % 2 == 0), f"overlap needs an even window_size > 0, got {window_size}")


class EVAAttention(nn.Module):
    """Multi-head EVA self-attention with fairseq-style q/k/v/out projections.

    Bidirectional (causal=False): blocks of `window_size` (with `overlap`, plus window_size/2 on each
    side) and chunks covering the whole sequence, given as `num_chunks` C or `chunk_size`.
    Causal (causal=True): E^n is n's block up to n (plus the previous block with `overlap`); chunks of
    `chunk_size` (dividing the window) are visible once they end before E^n starts.
    No chunks (0) is plain block-local attention. Inputs are batch first: B x N x embed_dim.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        causal=False,
        window_size=16,
        overlap=False,
        num_chunks=0,
        chunk_size=0,
        proposal="layernorm",
        use_rpe=True,
        rpe_num_buckets=32,
        rpe_max_distance=128,
        dropout=0.0,
        bias=True,
    ):
        super().__init__()
        check_options(embed_dim, num_heads, causal, window_size, overlap, num_chunks, chunk_size, proposal, dropout)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale = self.head_dim**-0.5
        self.causal = causal
        self.window_size = window_size
        self.overlap = bool(overlap)
        self.num_chunks = num_chunks
        self.chunk_size = chunk_size
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.chunks = ChunkSummaries(self.head_dim, proposal) if (num_chunks or chunk_size) else None
        self.rpe = None
        if use_rpe and window_size > 0:
            self.rpe = RelativePositionBias(num_heads, not causal, rpe_num_buckets, rpe_max_distance)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self):
        # as fairseq's MultiheadAttention
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self):
        chunks = f"num_chunks={self.num_chunks}" if self.num_chunks else f"chunk_size={self.chunk_size}"
        return f"causal={self.causal}, window_size={self.window_size}, overlap={self.overlap}, {chunks}"

    # ---------------------------------------------------------------- full forward

    def forward(self, x: Tensor, key_padding_mask: Optional[Tensor] = None, cache: Optional[Cache] = None):
        """x: B x N x embed_dim; key_padding_mask: B x N, True at pads; cache: incremental decoding state.

        Pads may be anywhere (fairseq left-pads sources): each sequence is laid out from its own first
        real token, so its output does not depend on the batch it is in. Pad positions return zeros
        before the output projection.
        """
        if cache is not None:
            return self._decode(x, key_padding_mask, cache)
        B, N, _ = x.shape
        lengths = order = None
        if key_padding_mask is not None:
            if key_padding_mask.shape != (B, N):
                raise ValueError(f"key_padding_mask must be B x N = {(B, N)}, got {tuple(key_padding_mask.shape)}")
            pad = key_padding_mask.to(torch.bool)
            if pad.any():
                order = torch.sort(pad.to(torch.int8), dim=1, stable=True).indices  # real tokens first
                x = x.gather(1, order.unsqueeze(-1).expand_as(x))
                lengths = (~pad).sum(1)
        q, k, v = (self._split_heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        y = self._causal(q, k, v) if self.causal else self._bidirectional(q, k, v, lengths)
        y = y.transpose(1, 2).reshape(B, N, self.embed_dim)
        if lengths is not None:
            is_pad = torch.arange(N, device=x.device)[None, :] >= lengths[:, None]
            y = y.masked_fill(is_pad.unsqueeze(-1), 0)
            y = torch.zeros_like(y).scatter(1, order.unsqueeze(-1).expand_as(y), y)
        return self.out_proj(y)

    def _split_heads(self, x):
        B, N, _ = x.shape
        return x.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # B x H x N x d

    def _attend(self, scores, values):
        """One softmax over concatenated candidate groups; values[i] matches scores[i] (last dims)."""
        widths = [s.size(-1) for s in scores]
        scores = torch.cat(scores, dim=-1) if len(scores) > 1 else scores[0]
        probs = self.dropout(torch.softmax(upcast(scores), dim=-1).to(values[0].dtype))
        out = None
        for p, v in zip(probs.split(widths, dim=-1), values):
            out = p @ v if out is None else out + p @ v
        return out

    def _rpe_bias(self, relative_position):
        return self.rpe(relative_position.to(torch.long)).unsqueeze(1)  # H x 1 x ... (broadcast over blocks)

    def _bidirectional(self, q, k, v, lengths):
        B, H, N, d = q.shape
        w = self.window_size
        low = torch.finfo(q.dtype).min
        scores, values = [], []
        if w > 0:
            nb = math.ceil(N / w)
            q, k, v = (F.pad(t, (0, 0, 0, nb * w - N)) for t in (q, k, v))
            if self.overlap:
                # keys of block b: positions [b*w - w/2, b*w + w + w/2)
                offset = -(w // 2)
                k_blocks = F.pad(k, (0, 0, w // 2, w // 2)).unfold(2, 2 * w, w)  # B x H x nb x d x 2w
                v_blocks = F.pad(v, (0, 0, w // 2, w // 2)).unfold(2, 2 * w, w).transpose(-1, -2)
            else:
                offset = 0
                k_blocks = k.unflatten(2, (nb, w)).transpose(-1, -2)
                v_blocks = v.unflatten(2, (nb, w))
            width = v_blocks.size(-2)
            local = (q.unflatten(2, (nb, w)) @ k_blocks) * self.scale  # B x H x nb x w x width
            key_offsets = torch.arange(width, device=q.device) + offset
            if self.rpe is not None:
                local = local + self._rpe_bias(key_offsets[None, :] - torch.arange(w, device=q.device)[:, None])
            key_pos = torch.arange(nb, device=q.device)[:, None] * w + key_offsets  # nb x width
            length = N if lengths is None else lengths[:, None, None]
            key_ok = (key_pos >= 0) & (key_pos < length)  # (B x) nb x width
            local = local.masked_fill(~key_ok.unsqueeze(-2).unsqueeze(-4), low)
            scores.append(local)
            values.append(v_blocks)
        if self.chunks is not None:
            k_summary, beta, chunk_ok = self._bidirectional_chunks(q[:, :, :N], k[:, :, :N], v[:, :, :N], lengths)
            chunk_scores = (q @ k_summary.transpose(-1, -2)) * self.scale  # B x H x N' x C
            if chunk_ok is not None:
                chunk_scores = chunk_scores.masked_fill(~chunk_ok[:, None, None, :], low)
            if w > 0:
                chunk_scores = chunk_scores.unflatten(2, (-1, w))
                beta = beta.unsqueeze(2)
            scores.append(chunk_scores)
            values.append(beta)
        out = self._attend(scores, values)
        return out.flatten(2, 3)[:, :, :N] if w > 0 else out

    def _bidirectional_chunks(self, q, k, v, lengths):
        """Chunks over each sequence's own L real tokens: C chunks of ceil(L / C), or chunks of chunk_size."""
        B, H, N, d = q.shape
        if lengths is None:
            size = self.chunk_size or math.ceil(N / self.num_chunks)
            if N % size == 0:
                return (*self.chunks.uniform(q, k, v, size), None)
            lengths = torch.full((B,), N, device=q.device)
        if self.chunk_size:
            sizes, count = torch.full_like(lengths, self.chunk_size), math.ceil(N / self.chunk_size)
        else:
            sizes, count = (lengths + self.num_chunks - 1).div(self.num_chunks, rounding_mode="floor"), self.num_chunks
        positions = torch.arange(N, device=q.device)[None, :]
        chunk_ids = positions // sizes.clamp_min(1)[:, None]
        chunk_ids = chunk_ids.masked_fill(positions >= lengths[:, None], count)
        return self.chunks.segmented(q, k, v, chunk_ids, count)

    def _causal(self, q, k, v):
        B, H, N, d = q.shape
        w, s = self.window_size, self.chunk_size
        nb = math.ceil(N / w)
        q, k, v = (F.pad(t, (0, 0, 0, nb * w - N)) for t in (q, k, v))
        k_blocks, v_blocks = k.unflatten(2, (nb, w)), v.unflatten(2, (nb, w))
        offset = 0
        if self.overlap:  # E also holds the whole previous block (none for block 0)
            offset = -w
            k_blocks = torch.cat([F.pad(k_blocks, (0, 0, 0, 0, 1, 0))[:, :, :-1], k_blocks], dim=3)
            v_blocks = torch.cat([F.pad(v_blocks, (0, 0, 0, 0, 1, 0))[:, :, :-1], v_blocks], dim=3)
        width = k_blocks.size(3)
        local = (q.unflatten(2, (nb, w)) @ k_blocks.transpose(-1, -2)) * self.scale  # B x H x nb x w x width
        relative = torch.arange(width, device=q.device)[None, :] + offset - torch.arange(w, device=q.device)[:, None]
        if self.rpe is not None:
            local = local + self._rpe_bias(relative)
        hidden = relative > 0  # w x width: the future
        if self.overlap:
            no_previous = (torch.arange(nb, device=q.device) == 0)[:, None, None] & (relative < -torch.arange(w, device=q.device)[:, None])
            hidden = hidden | no_previous  # nb x w x width
        low = torch.finfo(q.dtype).min
        scores, values = [local.masked_fill(hidden, low)], [v_blocks]

        # chunks of the last (1 + overlap) blocks are visible to no block: skip them
        per_block = w // s if s else 0
        used = max(0, nb - 1 - self.overlap) * per_block
        if used > 0:
            k_summary, beta = self.chunks.uniform(q[:, :, : used * s], k[:, :, : used * s], v[:, :, : used * s], s)
            chunk_scores = ((q @ k_summary.transpose(-1, -2)) * self.scale).unflatten(2, (nb, w))
            first_block = (torch.arange(nb, device=q.device) - int(self.overlap)).clamp_min(0)
            visible = torch.arange(used, device=q.device)[None, :] < (first_block * per_block)[:, None]  # nb x used
            scores.append(chunk_scores.masked_fill(~visible[:, None, :], low))
            values.append(beta.unsqueeze(2))
        return self._attend(scores, values).flatten(2, 3)[:, :, :N]

    # ---------------------------------------------------------------- incremental decoding

    def _decode(self, x, key_padding_mask, cache: Cache):
        if not self.causal:
            raise ValueError("incremental decoding (a cache) needs causal EVA (causal=True)")
        if key_padding_mask is not None and key_padding_mask.any():
            raise ValueError("pads among incrementally decoded tokens are not supported: decode each sequence's real tokens")
        steps = [self._step(x[:, t : t + 1], cache) for t in range(x.size(1))]
        return self.out_proj(torch.cat(steps, dim=1))

    def _step(self, x, cache: Cache):
        """One token. The cache holds the current block's q, k, v, the previous block's k, v (overlap),
        and k~, beta of every completed chunk: O(w + N / s), not O(N)."""
        B = x.size(0)
        w, s = self.window_size, self.chunk_size
        q, k, v = (self._split_heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        k_block = torch.cat([cache["k_block"], k], dim=2) if "k_block" in cache else k
        v_block = torch.cat([cache["v_block"], v], dim=2) if "v_block" in cache else v
        i = k_block.size(2) - 1  # position of this token in its block
        keys, vals, offset = k_block, v_block, 0
        if "k_prev" in cache:
            keys, vals, offset = torch.cat([cache["k_prev"], k_block], 2), torch.cat([cache["v_prev"], v_block], 2), -w
        local = (q @ keys.transpose(-1, -2)) * self.scale  # B x H x 1 x width
        if self.rpe is not None:
            local = local + self._rpe_bias(torch.arange(keys.size(2), device=x.device) + offset - i)
        scores, values = [local], [vals]
        if "k_chunks" in cache:
            block = cache["k_chunks"].size(2) * s // w  # index of this token's block
            visible = max(0, block - int(self.overlap)) * (w // s)
            if visible > 0:
                scores.append((q @ cache["k_chunks"][:, :, :visible].transpose(-1, -2)) * self.scale)
                values.append(cache["beta_chunks"][:, :, :visible])
        out = self._attend(scores, values)  # B x H x 1 x d

        if s:
            q_block = torch.cat([cache["q_block"], q], dim=2) if "q_block" in cache else q
            cache["q_block"] = q_block
            if (i + 1) % s == 0:  # a chunk is complete: summarise it as the full forward does
                k_summary, beta = self.chunks.uniform(q_block[:, :, -s:], k_block[:, :, -s:], v_block[:, :, -s:], s)
                if "k_chunks" in cache:
                    k_summary = torch.cat([cache["k_chunks"], k_summary], dim=2)
                    beta = torch.cat([cache["beta_chunks"], beta], dim=2)
                cache["k_chunks"], cache["beta_chunks"] = k_summary, beta
        cache["k_block"], cache["v_block"] = k_block, v_block
        if i + 1 == w:  # the block is complete
            if self.overlap:
                cache["k_prev"], cache["v_prev"] = k_block, v_block
            for name in ("q_block", "k_block", "v_block"):
                cache.pop(name, None)
        return out.transpose(1, 2).reshape(B, 1, self.embed_dim)

    @staticmethod
    def reorder_cache(cache: Cache, new_order: Tensor):
        """Select the batch rows of the cache (beam search)."""
        for name, value in cache.items():
            cache[name] = value.index_select(0, new_order)
        return cache
