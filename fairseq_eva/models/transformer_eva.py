"""Translation: fairseq's transformer with EVA in encoder self-attention (and, as an option, causal EVA
in decoder self-attention).

Architectures:
- transformer_eva_wmt_en_de: the paper's WMT14 En-De base model (6+6 layers, 512, FFN 2048, 8 heads),
  EVA in encoder self-attention with C = 8 chunks and windows of 16 with overlap (abs(E) = 32,
  the paper's EVA-32), T5 relative bias in E. abs(E) = 16: --eva-window-size 8 (or --eva-overlap false);
  abs(E) = 64: --eva-window-size 32.
- transformer_eva_iwslt_de_en: fairseq's transformer_iwslt_de_en with the same EVA settings.
- transformer_eva_tiny: 2+2 layers of 64 for tests and demos (windows of 4 with overlap, C = 4).
--encoder-attention softmax (and --decoder-attention softmax, the default) gives fairseq's transformer.
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel, transformer_iwslt_de_en, transformer_wmt_en_de
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.utils import safe_getattr

from ..modules import AttentionTransformerDecoder, AttentionTransformerEncoder, add_translation_args
from ..modules.architecture_defaults import eva_decoder_defaults, eva_defaults
from ..modules.plan import building
from ..modules.roles import DECODER, ENCODER
from .build import prepare_args
from .kernel_checks import PinnedKernelTrains
from .precision import HalfNeedsCUDA


@register_model("transformer_eva")
class TransformerEVAModel(HalfNeedsCUDA, PinnedKernelTrains, TransformerModel):
    """fairseq's TransformerModel whose encoder (and optionally decoder) self-attention is EVA."""

    # each self-attention's role and the option that chooses its mechanism
    ATTENTION_ROLES = {ENCODER: "encoder_attention", DECODER: "decoder_attention"}

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_translation_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args, plans = prepare_args(cls, args, base_architecture, task)
        with building(plans):
            return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return AttentionTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return AttentionTransformerDecoder(
            args, tgt_dict, embed_tokens, no_encoder_attn=safe_getattr(args, "no_cross_attention", False)
        )


def eva_translation_defaults(args, window_size=16, overlap=True, num_chunks=8, chunk_size=0,
                             decoder_window_size=16, decoder_chunk_size=4, decoder_overlap=False):
    args.encoder_attention = safe_getattr(args, "encoder_attention", "eva")
    args.decoder_attention = safe_getattr(args, "decoder_attention", "softmax")
    eva_defaults(args, window_size, overlap, num_chunks, chunk_size)
    eva_decoder_defaults(args, decoder_window_size, decoder_chunk_size, decoder_overlap)


@register_model_architecture("transformer_eva", "transformer_eva")
def base_architecture(args):
    eva_translation_defaults(args)
    transformer_base_architecture(args)


@register_model_architecture("transformer_eva", "transformer_eva_wmt_en_de")
def transformer_eva_wmt_en_de(args):
    eva_translation_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("transformer_eva", "transformer_eva_iwslt_de_en")
def transformer_eva_iwslt_de_en(args):
    eva_translation_defaults(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("transformer_eva", "transformer_eva_tiny")
def transformer_eva_tiny(args):
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 256)
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", args.encoder_embed_dim)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", args.encoder_ffn_embed_dim)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)
    eva_translation_defaults(args, window_size=4, overlap=True, num_chunks=4, chunk_size=0,
                             decoder_window_size=4, decoder_chunk_size=2, decoder_overlap=False)
    transformer_base_architecture(args)
