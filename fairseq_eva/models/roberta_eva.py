"""Masked LM: RoBERTa (pre-norm, as fairseq's roberta_prenorm) with EVA in encoder self-attention.

Architectures:
- roberta_eva: RoBERTa-base pre-norm, 2048 positions, EVA with windows of 256 (abs(E) = 256) and
  C = 128 chunks (the paper's Books3 setting).
- roberta_eva_4096: the same with 4096 positions.
- roberta_eva_tiny: 2 layers of 64, 128 positions, windows of 16 and C = 4, for tests and demos.
--encoder-attention softmax gives fairseq's roberta_prenorm with the same architecture.
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import RobertaEncoder, RobertaModel, init_bert_params
from fairseq.models.roberta.model import roberta_prenorm_architecture
from fairseq.utils import safe_getattr, safe_hasattr

from ..modules import AttentionTransformerEncoder, add_masked_lm_args
from ..modules.architecture_defaults import eva_defaults
from ..modules.plan import building
from ..modules.roles import ENCODER
from .build import prepare_args
from .kernel_checks import PinnedKernelTrains
from .precision import HalfNeedsCUDA


@register_model("roberta_eva")
class RobertaEVAModel(HalfNeedsCUDA, PinnedKernelTrains, RobertaModel):
    """fairseq's RobertaModel whose encoder self-attention is EVA."""

    # each self-attention's role and the option that chooses its mechanism
    ATTENTION_ROLES = {ENCODER: "encoder_attention"}

    @classmethod
    def hub_models(cls):
        return {}

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        add_masked_lm_args(parser)

    @classmethod
    def build_model(cls, args, task):
        def architecture(args):
            base_architecture(args)
            if not safe_hasattr(args, "max_positions"):
                if not safe_hasattr(args, "tokens_per_sample"):
                    args.tokens_per_sample = task.max_positions()
                args.max_positions = args.tokens_per_sample

        args, plans = prepare_args(cls, args, architecture, task)
        with building(plans):
            encoder = RobertaEVAEncoder(args, task.source_dictionary)
        return cls(args, encoder)


class RobertaEVAEncoder(RobertaEncoder):
    """RoBERTa's encoder built on AttentionTransformerEncoder."""

    def build_encoder(self, args, dictionary, embed_tokens):
        encoder = AttentionTransformerEncoder(args, dictionary, embed_tokens)
        encoder.apply(init_bert_params)
        return encoder


def eva_masked_lm_defaults(args, window_size=256, overlap=False, num_chunks=128, chunk_size=0):
    args.encoder_attention = safe_getattr(args, "encoder_attention", "eva")
    eva_defaults(args, window_size, overlap, num_chunks, chunk_size)


@register_model_architecture("roberta_eva", "roberta_eva")
def base_architecture(args):
    args.max_positions = safe_getattr(args, "max_positions", 2048)
    eva_masked_lm_defaults(args)
    roberta_prenorm_architecture(args)


@register_model_architecture("roberta_eva", "roberta_eva_4096")
def roberta_eva_4096(args):
    args.max_positions = safe_getattr(args, "max_positions", 4096)
    base_architecture(args)


@register_model_architecture("roberta_eva", "roberta_eva_tiny")
def roberta_eva_tiny(args):
    args.encoder_layers = safe_getattr(args, "encoder_layers", 2)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 256)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    args.max_positions = safe_getattr(args, "max_positions", 128)
    eva_masked_lm_defaults(args, window_size=16, overlap=False, num_chunks=4)
    base_architecture(args)
