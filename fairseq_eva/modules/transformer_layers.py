"""fairseq's transformer layers, encoder and decoder with any self-attention of the registry.

Only `build_self_attention` (layers) and `build_*_layer` (encoder, decoder) change; everything else is
fairseq's own. Which self-attention a layer gets is its role's plan (plan.py: --encoder-attention /
--decoder-attention and the chosen mechanism's options); with `softmax` the layer is exactly fairseq's (same
parameters, same names).
"""

import functools

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from .memory import check_batch
from .plan import plan_for
from .roles import DECODER, ENCODER, LM
from .self_attention import multihead


def build_attention(plan, embed_dim, num_heads, dropout):
    """The self-attention module of `plan` (checked when the model was built), with fairseq's calling convention;
    each batch is checked against the machine's memory before the layer runs on it."""
    mechanism = plan.mechanism
    layer = multihead(mechanism.module_class())(embed_dim, num_heads, causal=plan.causal, dropout=dropout,
                                                **plan.kwargs())
    layer.attention_plan = plan
    if mechanism.memory is not None:
        layer.batch_check = functools.partial(check_batch, plan, num_heads=num_heads)
    return layer


def _wrap(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer do."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class AttentionEncoderLayer(TransformerEncoderLayerBase):
    """Encoder layer whose self-attention is --encoder-attention's (bidirectional EVA by default)."""

    def build_self_attention(self, embed_dim, cfg):
        plan = plan_for(cfg, ENCODER)
        if plan.kind != "softmax":
            return build_attention(plan, embed_dim, cfg.encoder.attention_heads, cfg.attention_dropout)
        return super().build_self_attention(embed_dim, cfg)


class AttentionDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer whose self-attention is --decoder-attention's (causal EVA with `eva`).

    `eva_role` says which options configure it: the translation decoder's (--eva-decoder-*) or the
    language model's (the common --eva-* options).
    """

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, eva_role=DECODER):
        self.eva_role = eva_role
        super().__init__(cfg, no_encoder_attn=no_encoder_attn, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        plan = plan_for(cfg, self.eva_role)
        if plan.kind != "softmax":
            if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
                raise ValueError(f"--decoder-attention {plan.kind} supports neither bias_kv, zero_attn nor "
                                 "--cross-self-attention")
            return build_attention(plan, embed_dim, cfg.decoder.attention_heads, cfg.attention_dropout)
        return super().build_self_attention(embed_dim, cfg, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)


class AttentionTransformerEncoder(TransformerEncoder):
    """fairseq's TransformerEncoder built of AttentionEncoderLayer."""

    def build_encoder_layer(self, args):
        cfg = TransformerConfig.from_namespace(args)
        return _wrap(AttentionEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class AttentionTransformerDecoder(TransformerDecoder):
    """fairseq's TransformerDecoder built of AttentionDecoderLayer."""

    eva_role = DECODER

    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        layer = AttentionDecoderLayer(cfg, no_encoder_attn, eva_role=self.eva_role)
        return _wrap(layer, cfg)


class AttentionLanguageModelDecoder(AttentionTransformerDecoder):
    """The language model's decoder: its self-attention configured by the common options (no --eva-decoder-*)."""

    eva_role = LM


# their earlier names
EVATransformerEncoderLayer, EVATransformerDecoderLayer = AttentionEncoderLayer, AttentionDecoderLayer
EVATransformerEncoder, EVATransformerDecoder = AttentionTransformerEncoder, AttentionTransformerDecoder
EVALanguageModelDecoder = AttentionLanguageModelDecoder
