"""The attention core: EVA, softmax and the paper's baselines (registry.py), plain PyTorch, no fairseq import."""

from . import registry
from .base import ProjectedAttention
from .chunks import ChunkSummaries, proposal_projection
from .eva import EVAAttention, check_options
from .relative_position import PlaceBias, RelativePositionBias, relative_position_bucket
from .softmax import SoftmaxAttention

__all__ = [
    "ChunkSummaries",
    "EVAAttention",
    "PlaceBias",
    "ProjectedAttention",
    "RelativePositionBias",
    "SoftmaxAttention",
    "check_options",
    "proposal_projection",
    "registry",
    "relative_position_bucket",
]
