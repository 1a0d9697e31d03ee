"""EVA's command-line options, their defaults and their build-time checks.

The options are plain argparse options (legacy fairseq models), added by the models' `add_args`.
Architecture functions fill in the paper's values with `getattr`, as fairseq's do, so every value can
be overridden on the command line. `validate_eva_args` runs when a model is built, before training:
it reuses the core's `check_options` and rewrites the core's parameter names into the option names.
"""

import argparse
import re

from fairseq.utils import safe_getattr

from ..attention import check_options
from ..attention.chunks import PROPOSALS
from ..attention.relative_position import RelativePositionBias

ATTENTION_CHOICES = ("eva", "softmax")

# Roles of an EVA self-attention: which options configure it.
ENCODER = "encoder"  # bidirectional EVA (translation encoder, RoBERTa)
DECODER = "decoder"  # causal EVA in the translation decoder (--eva-decoder-* options)
LM = "lm"  # causal EVA in the language model's decoder (common --eva-* options)

_TRUE = ("true", "t", "yes", "y", "1", "on")
_FALSE = ("false", "f", "no", "n", "0", "off")


def eva_bool(value):
    """true/false (also yes/no, 1/0, on/off) to a bool, without eval(); bools pass through."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _add_common(parser):
    parser.add_argument("--eva-window-size", type=int, metavar="INT",
                        help="EVA: size w of the local blocks; the local set E of a query is its block "
                             "(plus w/2 on each side with --eva-overlap, so abs(E) = 2w); 0 = no local set "
                             "(bidirectional only)")
    parser.add_argument("--eva-overlap", type=eva_bool, metavar="BOOL",
                        help="EVA: overlapping local windows (true/false); bidirectional: E also takes w/2 "
                             "positions on each side of the block (the paper's EVA-32 is w = 16 with overlap); "
                             "causal: E also takes the whole previous block")
    parser.add_argument("--eva-num-chunks", type=int, metavar="INT",
                        help="EVA (bidirectional): number C of chunks summarising the whole sequence, chunk "
                             "size ceil(L / C) for a sequence of L tokens; 0 = use --eva-chunk-size "
                             "(both 0: no chunks, plain block-local attention)")
    parser.add_argument("--eva-chunk-size", type=int, metavar="INT",
                        help="EVA: fixed chunk size instead of a fixed number of chunks; in causal EVA it "
                             "must divide the window size; 0 = use --eva-num-chunks")
    parser.add_argument("--eva-proposal", choices=list(PROPOSALS), metavar="{" + ",".join(PROPOSALS) + "}",
                        help="EVA: projection sigma of the chunk summaries that form the proposal: "
                             "Linear + LayerNorm (the paper's, 'layernorm'), Linear only, or the identity")
    parser.add_argument("--eva-rpe", type=eva_bool, metavar="BOOL",
                        help="EVA: T5-style bucketed relative position bias inside the local set (true/false)")
    parser.add_argument("--eva-rpe-num-buckets", type=int, metavar="INT",
                        help="EVA: number of relative position buckets (per direction: half, a quarter "
                             "when bidirectional, are exact distances)")
    parser.add_argument("--eva-rpe-max-distance", type=int, metavar="INT",
                        help="EVA: relative distance beyond which all positions share the last bucket")


def add_translation_args(parser):
    parser.add_argument("--encoder-attention", choices=ATTENTION_CHOICES,
                        help="self-attention of the encoder: eva (default) or softmax (the baseline, "
                             "fairseq's MultiheadAttention)")
    parser.add_argument("--decoder-attention", choices=ATTENTION_CHOICES,
                        help="self-attention of the decoder: softmax (default) or eva (causal EVA, set by "
                             "--eva-decoder-window-size, --eva-decoder-chunk-size, --eva-decoder-overlap)")
    _add_common(parser)
    parser.add_argument("--eva-decoder-window-size", type=int, metavar="INT",
                        help="causal EVA in the decoder (--decoder-attention eva): block size w")
    parser.add_argument("--eva-decoder-chunk-size", type=int, metavar="INT",
                        help="causal EVA in the decoder: chunk size, must divide the decoder window; "
                             "0 = no chunks (block-local attention)")
    parser.add_argument("--eva-decoder-overlap", type=eva_bool, metavar="BOOL",
                        help="causal EVA in the decoder: E also takes the whole previous block (true/false)")


def add_lm_args(parser):
    parser.add_argument("--decoder-attention", choices=ATTENTION_CHOICES,
                        help="self-attention of the language model: eva (default, causal EVA set by "
                             "--eva-window-size, --eva-chunk-size, --eva-overlap) or softmax (the baseline)")
    _add_common(parser)


def add_masked_lm_args(parser):
    parser.add_argument("--encoder-attention", choices=ATTENTION_CHOICES,
                        help="self-attention of the encoder: eva (default) or softmax (the baseline)")
    _add_common(parser)


# ------------------------------------------------------------------ defaults (used by the arch functions)


def common_defaults(args, window_size, overlap, num_chunks, chunk_size):
    """Set the EVA options that the command line left unset. A non-zero chunk size given on the command
    line turns the architecture's default number of chunks off (and the other way round), since only
    one of the two may be set."""
    args.eva_window_size = safe_getattr(args, "eva_window_size", window_size)
    args.eva_overlap = safe_getattr(args, "eva_overlap", overlap)
    user_chunks = safe_getattr(args, "eva_num_chunks", None)
    user_size = safe_getattr(args, "eva_chunk_size", None)
    if user_chunks is None:
        args.eva_num_chunks = 0 if user_size else num_chunks
    if user_size is None:
        args.eva_chunk_size = 0 if user_chunks else chunk_size
    args.eva_proposal = safe_getattr(args, "eva_proposal", "layernorm")
    args.eva_rpe = safe_getattr(args, "eva_rpe", True)
    args.eva_rpe_num_buckets = safe_getattr(args, "eva_rpe_num_buckets", 32)
    args.eva_rpe_max_distance = safe_getattr(args, "eva_rpe_max_distance", 128)


def decoder_defaults(args, window_size, chunk_size, overlap):
    args.eva_decoder_window_size = safe_getattr(args, "eva_decoder_window_size", window_size)
    args.eva_decoder_chunk_size = safe_getattr(args, "eva_decoder_chunk_size", chunk_size)
    args.eva_decoder_overlap = safe_getattr(args, "eva_decoder_overlap", overlap)


# ------------------------------------------------------------------ settings of one self-attention


def _role_options(role):
    """Core parameter name -> command-line option, for the options that configure `role`."""
    names = {
        "window_size": "--eva-window-size",
        "overlap": "--eva-overlap",
        "num_chunks": "--eva-num-chunks",
        "chunk_size": "--eva-chunk-size",
        "proposal": "--eva-proposal",
        "use_rpe": "--eva-rpe",
        "rpe_num_buckets": "--eva-rpe-num-buckets",
        "rpe_max_distance": "--eva-rpe-max-distance",
        "dropout": "--attention-dropout",
    }
    if role == DECODER:
        names.update(window_size="--eva-decoder-window-size", chunk_size="--eva-decoder-chunk-size",
                     overlap="--eva-decoder-overlap")
    side = "encoder" if role == ENCODER else "decoder"
    names.update(embed_dim=f"--{side}-embed-dim", num_heads=f"--{side}-attention-heads")
    return names


def _attr(option):
    return option[2:].replace("-", "_")


def _get(args, name):
    try:
        return getattr(args, name)
    except AttributeError:  # includes omegaconf's ConfigAttributeError
        return None


def eva_kwargs(cfg, role):
    """Keyword arguments of EVAAttention (besides embed_dim and num_heads) for `role`, from the options."""
    names = _role_options(role)
    kwargs = {"causal": role != ENCODER}
    for key in ("window_size", "overlap", "chunk_size", "proposal", "use_rpe", "rpe_num_buckets",
                "rpe_max_distance", "dropout"):
        kwargs[key] = _get(cfg, _attr(names[key]))
    kwargs["num_chunks"] = 0 if role == DECODER else _get(cfg, "eva_num_chunks")
    for key in ("overlap", "use_rpe"):
        if kwargs[key] is not None:
            kwargs[key] = eva_bool(kwargs[key])
    if kwargs["dropout"] is None:
        kwargs["dropout"] = 0.0
    return kwargs


def translate_error(message, role):
    """Rewrite the core's parameter names in `message` into the option names of `role`."""
    names = _role_options(role)
    pattern = re.compile(r"\b(" + "|".join(sorted(names, key=len, reverse=True)) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], str(message))


def _where(role):
    return {ENCODER: "encoder self-attention", DECODER: "decoder self-attention",
            LM: "language model self-attention"}[role]


def check_role(cfg, role, embed_dim, num_heads):
    """Check the options of one EVA self-attention; ValueError naming the options if they are wrong."""
    names = _role_options(role)
    kwargs = eva_kwargs(cfg, role)
    missing = [names[k] for k, v in kwargs.items() if v is None and k in names]
    if missing:
        raise ValueError(f"EVA in the {_where(role)} needs {', '.join(missing)} (no architecture default set it)")
    try:
        check_options(embed_dim, num_heads, kwargs["causal"], kwargs["window_size"], kwargs["overlap"],
                      kwargs["num_chunks"], kwargs["chunk_size"], kwargs["proposal"], kwargs["dropout"])
        if kwargs["use_rpe"] and kwargs["window_size"] > 0:
            RelativePositionBias(num_heads, not kwargs["causal"], kwargs["rpe_num_buckets"],
                                 kwargs["rpe_max_distance"])
    except (ValueError, TypeError) as error:
        raise ValueError(f"{translate_error(error, role)} (EVA in the {_where(role)})") from None


def attention_kind(cfg, option):
    """'eva' or 'softmax' from --encoder-attention / --decoder-attention; ValueError naming the option."""
    value = _get(cfg, _attr(option))
    if value not in ATTENTION_CHOICES:
        raise ValueError(f"{option} must be one of {', '.join(ATTENTION_CHOICES)}; got {value!r}")
    return value


def validate_eva_args(args, roles):
    """Run at model build time. `roles` maps a role to (attention option, embed dim, heads)."""
    for role, (option, embed_dim, num_heads) in roles.items():
        if attention_kind(args, option) != "eva":
            continue
        for name in ("eva_overlap", "eva_rpe", "eva_decoder_overlap"):
            value = _get(args, name)
            if value is not None and not isinstance(value, bool):
                try:
                    setattr(args, name, eva_bool(value))
                except argparse.ArgumentTypeError as error:
                    raise ValueError(f"--{name.replace('_', '-')}: {error}") from None
        check_role(args, role, embed_dim, num_heads)
        if (_get(args, "quant_noise_pq") or 0) > 0:
            raise ValueError(f"--quant-noise-pq is not supported by EVA attention ({option} eva)")
        if role != ENCODER and _get(args, "cross_self_attention"):
            raise ValueError(f"--cross-self-attention is not supported with {option} eva")
