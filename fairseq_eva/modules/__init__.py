"""fairseq-facing modules: the MultiheadAttention adapter, EVA layers, encoder and decoders, options."""

from .options import (
    EVAOptionError,
    EVAOptions,
    add_lm_args,
    add_masked_lm_args,
    add_translation_args,
    eva_bool,
    validate_eva_args,
)
from .self_attention import EVAMultiheadAttention, multihead
from .transformer_layers import (
    EVALanguageModelDecoder,
    EVATransformerDecoder,
    EVATransformerDecoderLayer,
    EVATransformerEncoder,
    EVATransformerEncoderLayer,
)

__all__ = [
    "EVALanguageModelDecoder",
    "EVAMultiheadAttention",
    "multihead",
    "EVAOptionError",
    "EVAOptions",
    "EVATransformerDecoder",
    "EVATransformerDecoderLayer",
    "EVATransformerEncoder",
    "EVATransformerEncoderLayer",
    "add_lm_args",
    "add_masked_lm_args",
    "add_translation_args",
    "eva_bool",
    "validate_eva_args",
]
