"""The EVA attention core: plain PyTorch, no fairseq import."""

from .chunks import ChunkSummaries, proposal_projection
from .eva import EVAAttention, check_options
from .relative_position import RelativePositionBias, relative_position_bucket

__all__ = [
    "ChunkSummaries",
    "EVAAttention",
    "RelativePositionBias",
    "check_options",
    "proposal_projection",
    "relative_position_bucket",
]
