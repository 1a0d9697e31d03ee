"""Language model: fairseq's transformer_lm with causal EVA in decoder self-attention.

Architectures:
- transformer_lm_eva_wiki103: fairseq's 16-layer adaptive-input Wikitext-103 model (Baevski & Auli,
  transformer_lm_wiki103) with causal EVA, windows of 128 and chunks of 8 (C = 64 at length 512).
- transformer_lm_eva_wiki103_32l: the same with 32 layers and LayerDrop 0.2.
- transformer_lm_eva_tiny: 2 layers of 64 for tests and demos (windows of 16, chunks of 4).
--decoder-attention softmax gives the same model with fairseq's softmax attention: the baseline to
compare with. fairseq's own --arch transformer_lm is another model (its bare config defaults: post-norm,
no final LayerNorm, 512-dimensional input and output embeddings whatever --decoder-embed-dim).
"""

import ast

from fairseq import options
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer_lm import (
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    base_lm_architecture,
    transformer_lm_baevski_wiki103,
)
from fairseq.modules import AdaptiveInput, CharacterTokenEmbedder
from fairseq.utils import safe_getattr

from ..modules import AttentionLanguageModelDecoder, add_lm_args
from ..modules.architecture_defaults import eva_defaults
from ..modules.plan import building
from ..modules.roles import LM
from .build import prepare_args
from .kernel_checks import PinnedKernelTrains
from .precision import HalfNeedsCUDA


@register_model("transformer_lm_eva")
class TransformerLanguageModelEVA(HalfNeedsCUDA, PinnedKernelTrains, TransformerLanguageModel):
    """fairseq's TransformerLanguageModel whose decoder self-attention is causal EVA.

    A legacy (argparse) model, so that the EVA options are command-line options with architecture
    defaults; the other options are fairseq's transformer_lm options.
    """

    # each self-attention's role and the option that chooses its mechanism
    ATTENTION_ROLES = {LM: "decoder_attention"}

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def add_args(cls, parser):
        gen_parser_from_dataclass(parser, TransformerLanguageModelConfig(), delete_default=True)
        add_lm_args(parser)

    @classmethod
    def build_model(cls, args, task):
        args, plans = prepare_args(cls, args, base_lm_eva_architecture, task)

        # fairseq's TransformerLanguageModel.build_model, with the EVA decoder
        if args.decoder_layers_to_keep:
            args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
        if safe_getattr(args, "max_target_positions", None) is None:
            args.max_target_positions = safe_getattr(args, "tokens_per_sample", DEFAULT_MAX_TARGET_POSITIONS)
        if args.character_embeddings:
            embed_tokens = CharacterTokenEmbedder(
                task.source_dictionary,
                ast.literal_eval(args.character_filters),  # fairseq eval()s it; a literal is enough
                args.character_embedding_dim,
                args.decoder_embed_dim,
                args.char_embedder_highway_layers,
            )
        elif args.adaptive_input:
            embed_tokens = AdaptiveInput(
                len(task.source_dictionary),
                task.source_dictionary.pad(),
                args.decoder_input_dim,
                args.adaptive_input_factor,
                args.decoder_embed_dim,
                options.eval_str_list(args.adaptive_input_cutoff, type=int),
                args.quant_noise_pq,
                args.quant_noise_pq_block_size,
            )
        else:
            embed_tokens = cls.build_embedding(args, task.source_dictionary, args.decoder_input_dim)
        if args.tie_adaptive_weights:
            assert args.adaptive_input
            assert args.adaptive_input_factor == args.adaptive_softmax_factor
            assert args.adaptive_softmax_cutoff == args.adaptive_input_cutoff, "{} != {}".format(
                args.adaptive_softmax_cutoff, args.adaptive_input_cutoff
            )
            assert args.decoder_input_dim == args.decoder_output_dim
        with building(plans):
            decoder = AttentionLanguageModelDecoder(args, task.target_dictionary, embed_tokens, no_encoder_attn=True)
        return cls(decoder)


def eva_lm_defaults(args, window_size=128, chunk_size=8, overlap=False):
    args.decoder_attention = safe_getattr(args, "decoder_attention", "eva")
    eva_defaults(args, window_size, overlap, 0, chunk_size)


@register_model_architecture("transformer_lm_eva", "transformer_lm_eva")
def base_lm_eva_architecture(args):
    eva_lm_defaults(args)
    base_lm_architecture(args)


@register_model_architecture("transformer_lm_eva", "transformer_lm_eva_wiki103")
def transformer_lm_eva_wiki103(args):
    eva_lm_defaults(args)
    transformer_lm_baevski_wiki103(args)


@register_model_architecture("transformer_lm_eva", "transformer_lm_eva_wiki103_32l")
def transformer_lm_eva_wiki103_32l(args):
    args.decoder_layers = safe_getattr(args, "decoder_layers", 32)
    args.decoder_layerdrop = safe_getattr(args, "decoder_layerdrop", 0.2)
    transformer_lm_eva_wiki103(args)


@register_model_architecture("transformer_lm_eva", "transformer_lm_eva_tiny")
def transformer_lm_eva_tiny(args):
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 64)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)
    eva_lm_defaults(args, window_size=16, chunk_size=4, overlap=False)
    base_lm_eva_architecture(args)
