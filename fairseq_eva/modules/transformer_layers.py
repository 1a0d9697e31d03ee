"""fairseq's transformer layers, encoder and decoder with EVA (or another registered) self-attention.

Only `build_self_attention` (layers) and `build_*_layer` (encoder, decoder) change; everything else is
fairseq's own. Which self-attention a layer gets is read from --encoder-attention / --decoder-attention
(the names of fairseq_eva.attention.registry); with `softmax` the layer is exactly fairseq's (same
parameters, same names).
"""

import functools

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from ..attention import registry
from .options import DECODER, ENCODER, EVA_LAYER, LM, EVAOptions, attention_kind, check_batch_memory, mechanism_options
from .self_attention import EVAMultiheadAttention, multihead


def build_attention(kind, embed_dim, num_heads, cfg, role):
    """The self-attention `kind` of `role` (its options were checked by validate_eva_args when the model was
    built): EVA's layer from the --eva-* options, another mechanism from its own."""
    if kind in EVA_LAYER:
        return EVAMultiheadAttention(embed_dim, num_heads, **EVAOptions.from_args(cfg, role, chunks=kind == "eva").kwargs())
    mechanism = registry.get(kind)
    options = {**mechanism.defaults(), **mechanism_options(cfg, kind), **dict(mechanism.fixed)}
    layer = multihead(mechanism.module_class())(embed_dim, num_heads, causal=role != ENCODER,
                                                dropout=cfg.attention_dropout, **options)
    layer.batch_check = functools.partial(check_batch_memory, kind, options, num_heads=num_heads)
    return layer


def _wrap(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class EVATransformerEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer whose self-attention is --encoder-attention's (bidirectional EVA by default)."""

    def build_self_attention(self, embed_dim, cfg):
        kind = attention_kind(cfg, "encoder_attention")
        if kind != "softmax":
            return build_attention(kind, embed_dim, cfg.encoder.attention_heads, cfg, ENCODER)
        return super().build_self_attention(embed_dim, cfg)


class EVATransformerDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer whose self-attention is --decoder-attention's (causal EVA with `eva`).

    `eva_role` says which options configure it: the translation decoder's (--eva-decoder-*) or the
    language model's (the common --eva-* options).
    """

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, eva_role=DECODER):
        self.eva_role = eva_role
        super().__init__(cfg, no_encoder_attn=no_encoder_attn, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        kind = attention_kind(cfg, "decoder_attention")
        if kind != "softmax":
            if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
                raise ValueError(f"--decoder-attention {kind} supports neither bias_kv, zero_attn nor --cross-self-attention")
            return build_attention(kind, embed_dim, cfg.decoder.attention_heads, cfg, self.eva_role)
        return super().build_self_attention(embed_dim, cfg, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)


class EVATransformerEncoder(TransformerEncoder):
    """fairseq's TransformerEncoder built of EVATransformerEncoderLayer."""

    def build_encoder_layer(self, args):
        cfg = TransformerConfig.from_namespace(args)
        return _wrap(EVATransformerEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class EVATransformerDecoder(TransformerDecoder):
    """fairseq's TransformerDecoder built of EVATransformerDecoderLayer."""

    eva_role = DECODER

    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        layer = EVATransformerDecoderLayer(cfg, no_encoder_attn, eva_role=self.eva_role)
        return _wrap(layer, cfg)


class EVALanguageModelDecoder(EVATransformerDecoder):
    """The language model's decoder: causal EVA configured by the common --eva-* options."""

    eva_role = LM
