"""Which keys each block of queries sees: the one description every kernel of EVA follows.

Queries are cut into blocks of w. Block b (positions [b w, b w + w)) sees, exactly, its local keys: the
positions [b w + offset, b w + offset + width) inside the sequence (and, when causal, not after the query);
and the summaries of the chunks it may see: all of them (bidirectional), or those of the blocks before its
local keys (causal). docs/design.md, "Blocks and chunks", draws both layouts.
"""

import functools
from dataclasses import dataclass

import torch


def lowest(dtype):
    """The additive mask of a hidden key: exp() of it is 0, yet a row with every key hidden stays finite."""
    return torch.finfo(dtype).min


def additive_mask(hidden, dtype):
    """Additive mask from a boolean one (True = hidden)."""
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill(hidden, lowest(dtype))


def tensor_cache(fn):
    """fn memoised on its last call (as fla's tensor_cache): the same tensors, by identity and unchanged in place,
    and equal other arguments give the last result. The layers of a model share one padding mask, from which each
    would otherwise derive the same layout tensors again. Not while compiling (a graph computes them itself)."""
    last = None

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return a is b[0] and a._version == b[1]
        return type(a) is type(b) and a == b

    @functools.wraps(fn)
    def cached(*args):
        nonlocal last
        if torch.compiler.is_compiling():
            return fn(*args)
        if last is not None and len(args) == len(last[0]) and all(same(a, b) for a, b in zip(args, last[0])):
            return last[1]
        result = fn(*args)
        last = ([(a, a._version) if isinstance(a, torch.Tensor) else a for a in args], result)
        return result

    return cached


def visible_causal_chunks(block: int, overlap: bool, chunks_per_block: int) -> int:
    """Causal EVA: block b sees the first (b - overlap) * w / s chunk summaries, those that end before
    its local set begins (the previous block belongs to the local set with overlap)."""
    return max(0, block - int(overlap)) * chunks_per_block


@dataclass(frozen=True)
class BlockLayout:
    """window w, local keys [b w + offset, b w + offset + width), causal order inside them, and (causal)
    how many chunk summaries a block's worth of keys holds."""

    window: int
    offset: int
    width: int
    causal: bool
    overlap: bool = False
    chunks_per_block: int = 0

    @classmethod
    def bidirectional(cls, window, overlap):
        """E = the block, plus window / 2 keys on each side with overlap."""
        return cls(window, -(window // 2) if overlap else 0, 2 * window if overlap else window, False, overlap)

    @classmethod
    def causal_blocks(cls, window, overlap, chunk_size):
        """E = the block up to the query, plus the whole previous block with overlap; chunks of chunk_size."""
        per_block = window // chunk_size if chunk_size else 0
        return cls(window, -window if overlap else 0, 2 * window if overlap else window, True, overlap, per_block)

    def visible_chunks(self, block: int, total: int) -> int:
        """How many of the `total` chunk summaries block b sees (a prefix)."""
        if not self.causal:
            return total
        return min(total, visible_causal_chunks(block, self.overlap, self.chunks_per_block))

    def key_positions(self, b0: int, b1: int, device=None):
        """Positions of the local keys of blocks [b0, b1): (b1 - b0) x width (some may lie outside the sequence)."""
        blocks = torch.arange(b0, b1, device=device)[:, None]
        return blocks * self.window + self.offset + torch.arange(self.width, device=device)

    def relative_positions(self, device=None):
        """Key position minus query position for every (query, local key) pair of a block: w x width, the same
        for every block (what the relative position bias is a function of)."""
        return self.key_positions(0, 1, device) - torch.arange(self.window, device=device)[:, None]

    @property
    def num_offsets(self) -> int:
        """How many relative offsets (key - query) a block's (query, local key) pairs take: w + width - 1."""
        return self.window + self.width - 1

    def offsets(self, device=None):
        """Those relative offsets, in the order of a kernel's RPE table (H x num_offsets): from the first local key
        seen by the block's last query up to the last local key seen by its first query."""
        return torch.arange(self.num_offsets, device=device) + (self.offset - self.window + 1)

    def offset_index(self, device=None):
        """w x width: where in the RPE table the bias of query i and local key j is, j - i + w - 1."""
        return self.relative_positions(device) - (self.offset - self.window + 1)

    def after_query(self, device=None):
        """The local keys after the query, w x width: hidden from it in causal EVA."""
        return self.relative_positions(device) > 0
