"""fairseq-facing modules: the MultiheadAttention adapter, the transformer layers, encoder and decoders that host
any mechanism of the registry, and the attention options (flags, plans, checks, record)."""

from ..errors import AttentionOptionError
from ..errors import AttentionOptionError as EVAOptionError
from .flags import add_lm_args, add_masked_lm_args, add_translation_args, parse_bool
from .flags import parse_bool as eva_bool
from .plan import AttentionPlan
from .self_attention import EVAMultiheadAttention, multihead
from .transformer_layers import (
    AttentionDecoderLayer,
    AttentionEncoderLayer,
    AttentionLanguageModelDecoder,
    AttentionTransformerDecoder,
    AttentionTransformerEncoder,
    EVALanguageModelDecoder,
    EVATransformerDecoder,
    EVATransformerDecoderLayer,
    EVATransformerEncoder,
    EVATransformerEncoderLayer,
)

__all__ = [
    "AttentionDecoderLayer",
    "AttentionEncoderLayer",
    "AttentionLanguageModelDecoder",
    "AttentionOptionError",
    "AttentionPlan",
    "AttentionTransformerDecoder",
    "AttentionTransformerEncoder",
    "EVALanguageModelDecoder",
    "EVAMultiheadAttention",
    "EVAOptionError",
    "EVATransformerDecoder",
    "EVATransformerDecoderLayer",
    "EVATransformerEncoder",
    "EVATransformerEncoderLayer",
    "add_lm_args",
    "add_masked_lm_args",
    "add_translation_args",
    "eva_bool",
    "multihead",
    "parse_bool",
]
