"""The relative position bias EVA adds inside the local set E only: T5-style buckets of the offset key minus query
(RelativePositionBias), or a learned bias per place in the block (PlaceBias)."""

import math

import torch
from torch import nn

RPE_TYPES = ("buckets", "table")  # EVAAttention's rpe_type: RelativePositionBias, PlaceBias


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Bucket of each relative position (key position minus query position), as in T5.

    Half the buckets (a quarter when bidirectional, per direction) are exact small distances,
    the rest grow logarithmically up to `max_distance`, beyond which all share the last bucket.
    """
    n = -relative_position
    bucket = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp_min(0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(n.clamp_min(1).float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp_max(num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


def check_rpe(num_buckets, max_distance, bidirectional, name=lambda field: field):
    """ValueError naming the option when the buckets cannot be laid out (bidirectional: half per direction)."""
    least = 4 if bidirectional else 2
    if num_buckets < least:
        raise ValueError(f"{name('rpe_num_buckets')} must be at least {least}, got {num_buckets}")
    if max_distance < num_buckets // least + 1:
        raise ValueError(f"{name('rpe_max_distance')} ({max_distance}) is too small for {num_buckets} buckets")


class RelativePositionBias(nn.Module):
    """One learned scalar per (head, bucket), plus a constant `shift`; `forward` maps relative positions to
    H x ... biases. (A constant, not the scalars' start: a model's own initialisation, as RoBERTa's, may
    redraw every embedding table.)"""

    def __init__(self, num_heads, bidirectional, num_buckets=32, max_distance=128, shift=0.0):
        super().__init__()
        check_rpe(num_buckets, max_distance, bidirectional)
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bias = nn.Embedding(num_buckets, num_heads)
        self.shift = shift
        self._buckets = {}  # (num_offsets, first offset, device) -> the bucket of each offset: table()'s cache
        nn.init.normal_(self.bias.weight, std=0.02)

    def table(self, layout, device):
        """The kernels' RPE table of a BlockLayout (H x layout.num_offsets): the bias of each of its offsets. The
        buckets depend only on the layout and device, and are kept (a few layouts); the values are gathered anew."""
        key = (layout.num_offsets, layout.offset - layout.window, device)
        buckets = self._buckets.get(key)
        if buckets is None:
            buckets = self.bucket(layout.offsets(device))
            if not torch.compiler.is_compiling():  # (compiled code folds them in as constants)
                if len(self._buckets) >= 8:
                    self._buckets.clear()
                self._buckets[key] = buckets
        return self.values(buckets)

    def bucket(self, relative_position):
        return relative_position_bucket(relative_position, self.bidirectional, self.num_buckets, self.max_distance)

    def values(self, buckets):
        """H x ... biases of the buckets."""
        values = self.bias(buckets) + self.shift if self.shift else self.bias(buckets)  # ... x H
        return values.movedim(-1, 0)

    def forward(self, relative_position):
        return self.values(self.bucket(relative_position))


class PlaceBias(nn.Module):
    """One learned scalar per (head, query place i in its block, local key place j among the block's local keys):
    an H x w x width table, the same for every block and not a function of j - i. The authors' masked-LM local
    attention bias (their `use_rpe`); w x width x H parameters. `shift` is a constant added to it, as in
    RelativePositionBias."""

    def __init__(self, num_heads, window, width, shift=0.0):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_heads, window, width))
        self.shift = shift
        nn.init.normal_(self.bias, std=0.02)

    def table(self, layout, device):
        """The kernels' bias as a per-place grid (H x layout.window x layout.width: the layout it was built for)."""
        return self.bias + self.shift if self.shift else self.bias

    def forward(self, query_place, key_place):
        """H x ... biases of (query place, local key place) pairs (broadcast together)."""
        values = self.bias[:, query_place, key_place]
        return values + self.shift if self.shift else values
