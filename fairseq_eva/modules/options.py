"""The model options of the attention choices: their command-line form, their architecture defaults and their
build-time checks. EVA (and local attention, EVA without chunks) has the `--eva-*` options below; every other
mechanism of the registry has `--NAME-OPTION`, generated from its registry entry (`add_mechanism_args`).

The options are plain argparse options (legacy fairseq models), added by the models' `add_args`; under
fairseq-hydra-train the same names are `model.` keys (`--eva-window-size` is `model.eva_window_size`).
Architecture functions fill in the paper's values with `getattr`, as fairseq's do, so every value can be
overridden.

Under fairseq-hydra-train the `model` keys of a legacy model are a free dict: `check_model_keys` stops a
key that the model does not know (a misspelled `eva_windw_size` would otherwise be kept and ignored).

When a model is built, `validate_eva_args` reads the options of each EVA self-attention into one typed
`EVAOptions` (EVAAttention's keyword arguments) and checks it; a bad value raises `EVAOptionError`, whose
message names the options as the user wrote them: `--eva-window-size` under fairseq-train (which prints it
as one line, `fairseq-train: error: ...`, like argparse, see fairseq_eva.errors) and `model.eva_window_size` under
fairseq-hydra-train (which prints it without a traceback). Another mechanism is built once on the meta device
to check its options (`_check_mechanism`), and a direction it lacks is refused, naming the choices that have it.
"""

import argparse
import dataclasses
import difflib
import functools
import os
import re
from typing import Callable

from fairseq.utils import safe_getattr

from ..attention import check_options, registry
from ..attention.chunks import PROPOSAL_MEANS, PROPOSALS
from ..attention.eva import COMPILE_MODES
from ..attention.kernels import KERNELS
from ..attention.relative_position import RPE_TYPES
from ..errors import UserError, under_hydra

ATTENTION_CHOICES = tuple(registry.choices())
EVA_LAYER = ("eva", "local")  # the mechanisms built by EVAAttention from the --eva-* options (local: no chunks)

# Roles of an EVA self-attention: which options configure it.
ENCODER = "encoder"  # bidirectional EVA (translation encoder, RoBERTa)
DECODER = "decoder"  # causal EVA in the translation decoder (--eva-decoder-* options)
LM = "lm"  # causal EVA in the language model's decoder (common --eva-* options)

_WHERE = {ENCODER: "encoder self-attention", DECODER: "decoder self-attention", LM: "language model self-attention"}

_TRUE = ("true", "t", "yes", "y", "1", "on")
_FALSE = ("false", "f", "no", "n", "0", "off")


class EVAOptionError(UserError, ValueError):
    """A bad EVA option, named as the user wrote it (a UserError: one line on the command line)."""


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


# ------------------------------------------------------------------ command-line options

_PROPOSAL_METAVAR = "{" + ",".join(PROPOSALS) + "}"
KERNEL_CHOICES = ("auto", *KERNELS)
# (option, argparse keywords); --eva-decoder-* configure the translation decoder
_COMMON = (
    ("--eva-window-size", dict(type=int, metavar="INT", help=(
        "EVA: size w of the local blocks; the local set E of a query is its block (plus w/2 on each side with "
        "--eva-overlap, so abs(E) = 2w); 0 = no local set (bidirectional only)"))),
    ("--eva-overlap", dict(type=eva_bool, metavar="BOOL", help=(
        "EVA: overlapping local windows (true/false); bidirectional: E also takes w/2 positions on each side of "
        "the block (the paper's EVA-32 is w = 16 with overlap); causal: E also takes the whole previous block"))),
    ("--eva-num-chunks", dict(type=int, metavar="INT", help=(
        "EVA (bidirectional): number C of chunks summarising the whole sequence, chunk size ceil(L / C) for a "
        "sequence of L tokens; 0 = use --eva-chunk-size (both 0: no chunks, plain block-local attention)"))),
    ("--eva-chunk-size", dict(type=int, metavar="INT", help=(
        "EVA: fixed chunk size instead of a fixed number of chunks; in causal EVA it must divide the window "
        "size; 0 = use --eva-num-chunks"))),
    ("--eva-proposal", dict(choices=list(PROPOSALS), metavar=_PROPOSAL_METAVAR, help=(
        "EVA: projection sigma of the chunk summaries that form the proposal: Linear + LayerNorm (the paper's, "
        "'layernorm'), Linear only, or the identity"))),
    ("--eva-proposal-mean", dict(choices=list(PROPOSAL_MEANS), metavar="{" + ",".join(PROPOSAL_MEANS) + "}", help=(
        "EVA: the proposal mean of a chunk, mu = sigma_q(q mean) + sigma_k(k mean) (sum, the paper's) or half of "
        "it (average, as the authors' bidirectional code; their causal code sums)"))),
    ("--eva-omega-noise", dict(type=eva_bool, metavar="BOOL", help=(
        "EVA: in training, draw each chunk's proposal sample omega = mu + noise (true, the paper's) or take "
        "omega = mu as at evaluation (false, a diagnostic)"))),
    ("--eva-chunk-logit-offset", dict(type=float, metavar="FLOAT", help=(
        "EVA: nats added to every chunk summary's logit, e.g. log(chunk size), as if a summary stood for all "
        "its chunk's keys (a diagnostic; the paper's is 0); carried exactly by the relative position bias, "
        "lowered by this value, so it needs --eva-rpe true"))),
    ("--eva-rpe", dict(type=eva_bool, metavar="BOOL", help=(
        "EVA: a learned relative position bias inside the local set (true/false), of --eva-rpe-type"))),
    ("--eva-rpe-type", dict(choices=list(RPE_TYPES), metavar="{" + ",".join(RPE_TYPES) + "}", help=(
        "EVA: the relative position bias: buckets (default; T5 buckets of the offset key minus query, "
        "--eva-rpe-num-buckets scalars a head) or table (the authors' masked-LM local attention bias: one learned "
        "scalar per head, query place in its block and local key place, not a function of the offset; w x width x H "
        "parameters a layer, width = w, or 2w with --eva-overlap); table needs --eva-rpe true and a window"))),
    ("--eva-rpe-num-buckets", dict(type=int, metavar="INT", help=(
        "EVA: number of relative position buckets (per direction: half, a quarter when bidirectional, are "
        "exact distances)"))),
    ("--eva-rpe-max-distance", dict(type=int, metavar="INT", help=(
        "EVA: relative distance beyond which all positions share the last bucket"))),
    ("--eva-kernel", dict(choices=list(KERNEL_CHOICES), metavar="{" + ",".join(KERNEL_CHOICES) + "}", help=(
        "EVA: the kernel of every EVA self-attention: auto (default: the fastest that takes each call on its "
        "device) or one pinned by name (an error where it cannot run a call)"))),
    ("--eva-compile", dict(choices=list(COMPILE_MODES), metavar="{" + ",".join(COMPILE_MODES) + "}", help=(
        "EVA: run each EVA self-attention's attention (the projections aside) under torch.compile(fullgraph=True) "
        "in this mode; none (default): eager. Shapes that change every batch recompile: bucket the lengths"))),
)
_DECODER = (
    ("--eva-decoder-window-size", dict(type=int, metavar="INT", help=(
        "causal EVA in the decoder (--decoder-attention eva): block size w"))),
    ("--eva-decoder-chunk-size", dict(type=int, metavar="INT", help=(
        "causal EVA in the decoder: chunk size, must divide the decoder window; 0 = no chunks (block-local "
        "attention)"))),
    ("--eva-decoder-overlap", dict(type=eva_bool, metavar="BOOL", help=(
        "causal EVA in the decoder: E also takes the whole previous block (true/false)"))),
)


def _add(parser, options):
    for option, keywords in options:
        parser.add_argument(option, **keywords)


_METAVAR = "{" + ",".join(ATTENTION_CHOICES) + "}"
_LOCAL = "local (EVA's window without chunks, set by the same --eva-* options)"


def _choices_help(direction):
    return ", ".join(registry.choices(direction))


def mechanism_option(mechanism, option):
    """The model attribute of a mechanism's option: performer's num_features is performer_num_features."""
    return f"{mechanism}_{option}"


def add_mechanism_args(parser):
    """--NAME-OPTION for every option of every mechanism outside the EVA layer (defaults: the paper's)."""
    for name, mechanism in registry.MECHANISMS.items():
        if name in EVA_LAYER:
            continue
        for option in mechanism.options:
            keywords = dict(metavar=option.type.__name__.upper(), type=eva_bool if option.type is bool else option.type,
                            help=f"{name} attention: {option.help} (default {option.default})")
            if option.choices:
                keywords.update(choices=list(option.choices), metavar="{" + ",".join(map(str, option.choices)) + "}")
            parser.add_argument("--" + mechanism_option(name, option.name).replace("_", "-"), **keywords)


def add_translation_args(parser):
    parser.add_argument("--encoder-attention", choices=ATTENTION_CHOICES, metavar=_METAVAR,
                        help="self-attention of the encoder: eva (default), softmax (the baseline, fairseq's "
                             f"MultiheadAttention), {_LOCAL}, or a baseline: {_choices_help(registry.BIDIRECTIONAL)}")
    parser.add_argument("--decoder-attention", choices=ATTENTION_CHOICES, metavar=_METAVAR,
                        help="self-attention of the decoder: softmax (default), eva (causal EVA, set by "
                             "--eva-decoder-window-size, --eva-decoder-chunk-size, --eva-decoder-overlap), or another "
                             f"causal choice: {_choices_help(registry.CAUSAL)}")
    _add(parser, _COMMON + _DECODER)
    add_mechanism_args(parser)


def add_lm_args(parser):
    parser.add_argument("--decoder-attention", choices=ATTENTION_CHOICES, metavar=_METAVAR,
                        help="self-attention of the language model: eva (default, causal EVA set by "
                             "--eva-window-size, --eva-chunk-size, --eva-overlap), softmax (the baseline), or another "
                             f"causal choice: {_choices_help(registry.CAUSAL)}")
    _add(parser, _COMMON)
    add_mechanism_args(parser)


def add_masked_lm_args(parser):
    parser.add_argument("--encoder-attention", choices=ATTENTION_CHOICES, metavar=_METAVAR,
                        help="self-attention of the encoder: eva (default), softmax (the baseline), "
                             f"{_LOCAL}, or a baseline: {_choices_help(registry.BIDIRECTIONAL)}")
    _add(parser, _COMMON)
    add_mechanism_args(parser)


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
    args.eva_omega_noise = safe_getattr(args, "eva_omega_noise", True)
    args.eva_proposal_mean = safe_getattr(args, "eva_proposal_mean", "sum")
    args.eva_chunk_logit_offset = safe_getattr(args, "eva_chunk_logit_offset", 0.0)
    args.eva_rpe = safe_getattr(args, "eva_rpe", True)
    args.eva_rpe_type = safe_getattr(args, "eva_rpe_type", "buckets")
    args.eva_rpe_num_buckets = safe_getattr(args, "eva_rpe_num_buckets", 32)
    args.eva_rpe_max_distance = safe_getattr(args, "eva_rpe_max_distance", 128)
    args.eva_kernel = safe_getattr(args, "eva_kernel", "auto")
    args.eva_compile = safe_getattr(args, "eva_compile", "none")


def decoder_defaults(args, window_size, chunk_size, overlap):
    args.eva_decoder_window_size = safe_getattr(args, "eva_decoder_window_size", window_size)
    args.eva_decoder_chunk_size = safe_getattr(args, "eva_decoder_chunk_size", chunk_size)
    args.eva_decoder_overlap = safe_getattr(args, "eva_decoder_overlap", overlap)


# ------------------------------------------------------------------ the settings of one self-attention


def _attributes(role):
    """EVAOptions field (and embed_dim, num_heads) -> the model attribute that sets it for `role`."""
    side = "encoder" if role == ENCODER else "decoder"
    prefix = "eva_decoder_" if role == DECODER else "eva_"
    return {
        "window_size": prefix + "window_size",
        "overlap": prefix + "overlap",
        "num_chunks": "eva_num_chunks",
        "chunk_size": prefix + "chunk_size",
        "proposal": "eva_proposal",
        "omega_noise": "eva_omega_noise",
        "proposal_mean": "eva_proposal_mean",
        "chunk_logit_offset": "eva_chunk_logit_offset",
        "use_rpe": "eva_rpe",
        "rpe_type": "eva_rpe_type",
        "rpe_num_buckets": "eva_rpe_num_buckets",
        "rpe_max_distance": "eva_rpe_max_distance",
        "dropout": "attention_dropout",
        "kernel": "eva_kernel",
        "compile": "eva_compile",
        "embed_dim": f"{side}_embed_dim",
        "num_heads": f"{side}_attention_heads",
    }


def option_name(attribute, hydra):
    """How the user writes a model attribute: `model.eva_window_size` (hydra) or `--eva-window-size`."""
    return f"model.{attribute}" if hydra else "--" + attribute.replace("_", "-")


def _get(args, name):
    try:
        return getattr(args, name)
    except AttributeError:  # includes omegaconf's ConfigAttributeError
        return None


@dataclasses.dataclass
class EVAOptions:
    """The settings of one EVA self-attention: EVAAttention's keyword arguments besides embed_dim and
    num_heads (see EVAAttention for their meaning)."""

    causal: bool
    window_size: int
    overlap: bool
    num_chunks: int
    chunk_size: int
    proposal: str
    omega_noise: bool
    chunk_logit_offset: float
    use_rpe: bool
    rpe_num_buckets: int
    rpe_max_distance: int
    dropout: float
    kernel: str
    compile: str = "none"
    proposal_mean: str = "sum"
    rpe_type: str = "buckets"

    @classmethod
    def from_args(cls, args, role, hydra=False, chunks=True):
        """The options of `role` from a model's args; EVAOptionError if one is unset or not a boolean.
        chunks=False: local attention, EVA's layer without chunks."""
        attributes = _attributes(role)
        values = {"causal": role != ENCODER}
        for field in dataclasses.fields(cls):
            if field.name == "causal":
                continue
            value = _get(args, attributes[field.name])
            if field.name in ("num_chunks", "chunk_size") and not chunks:
                value = 0
            elif field.name == "num_chunks" and role == DECODER:
                value = 0  # causal EVA has chunks of a fixed size
            elif field.name == "dropout" and value is None:
                value = 0.0
            elif field.name == "kernel" and value is None:  # (checkpoints from before the option)
                value = "auto"
            elif field.name == "compile" and value is None:  # likewise
                value = "none"
            elif field.name == "proposal_mean" and value is None:  # likewise
                value = "sum"
            elif field.name == "rpe_type" and value is None:  # likewise
                value = "buckets"
            elif field.name == "omega_noise" and value is None:  # likewise
                value = True
            elif field.name == "chunk_logit_offset" and value is None:  # likewise
                value = 0.0
            elif value is None:
                raise EVAOptionError(f"EVA in the {_WHERE[role]} needs {option_name(attributes[field.name], hydra)} "
                                     "(no architecture default set it)")
            elif field.type is bool:
                try:
                    value = eva_bool(value)
                except argparse.ArgumentTypeError as error:
                    raise EVAOptionError(f"{option_name(attributes[field.name], hydra)}: {error}") from None
            values[field.name] = value
        return cls(**values)

    def kwargs(self):
        return dataclasses.asdict(self)

    def check(self, embed_dim, num_heads, name: Callable[[str], str]):
        """Raise EVAOptionError naming the first bad option; `name(field)` is how the user writes a field's
        option. These are the conditions under which EVAAttention(embed_dim, num_heads, **self.kwargs())
        builds."""
        try:
            check_options(embed_dim, num_heads, **self.kwargs(), name=name)
        except ValueError as error:
            raise EVAOptionError(str(error)) from None


def attention_kind(cfg, attribute, hydra=False):
    """The mechanism's name from encoder_attention / decoder_attention; EVAOptionError naming the option."""
    value = _get(cfg, attribute)
    if value not in ATTENTION_CHOICES:
        raise EVAOptionError(f"{option_name(attribute, hydra)} must be one of {', '.join(ATTENTION_CHOICES)}; "
                             f"got {value!r}")
    return value


def mechanism_options(args, mechanism, hydra=False):
    """The keyword options of a mechanism outside the EVA layer, from the model's args (unset: the default)."""
    values = {}
    for option in registry.get(mechanism).options:
        attribute = mechanism_option(mechanism, option.name)
        value = _get(args, attribute)
        if value is None:
            value = option.default
        elif option.type is bool:
            try:
                value = eva_bool(value)
            except argparse.ArgumentTypeError as error:
                raise EVAOptionError(f"{option_name(attribute, hydra)}: {error}") from None
        else:
            try:
                value = option.type(value)
            except (TypeError, ValueError):
                raise EVAOptionError(f"{option_name(attribute, hydra)} must be a {option.type.__name__}, "
                                     f"got {value!r}") from None
        if option.choices and value not in option.choices:
            raise EVAOptionError(f"{option_name(attribute, hydra)} must be one of "
                                 f"{', '.join(map(str, option.choices))}; got {value!r}")
        values[option.name] = value
    return values


def longest_input(args, role, masked_lm=False, task=None):
    """(the most positions an input of a self-attention of `role` can have, the option that sets it as (group, key)):
    the model's positions (fairseq's default where unset) or, where the task is known and allows fewer, the task's."""
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    if masked_lm:
        limits = [(_get(args, "max_positions"), ("model", "max_positions"))]
    elif role == ENCODER:
        limits = [(_get(args, "max_source_positions") or DEFAULT_MAX_SOURCE_POSITIONS, ("model", "max_source_positions"))]
    else:
        limits = [(_get(args, "max_target_positions") or _get(args, "tokens_per_sample") or DEFAULT_MAX_TARGET_POSITIONS,
                   ("model", "max_target_positions"))]
    if task is not None:
        allowed = task.max_positions()
        if isinstance(allowed, tuple):  # translation: (source, target)
            limits.append((allowed[0], ("task", "max_source_positions")) if role == ENCODER else
                          (allowed[1], ("task", "max_target_positions")))
        else:
            limits.append((allowed, ("task", "tokens_per_sample")))
    return min(((n, where) for n, where in limits if isinstance(n, int)), key=lambda limit: limit[0])


def machine_memory():
    """Bytes of memory of the device the model will train on: the GPU's, or this machine's."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gigabytes(count):
    return f"{count / 2**30:,.1f} GiB"


# The floats one layer of a mechanism holds at least for a batch of B rows of N positions, H heads of d (what grows
# with its count option: its features, landmarks, projections or hash rounds of every token and head), that option,
# and how many times more a training step holds at least (forward and backward: measured 3 to 7 times on a CPU).
HELD = {
    "performer": ("num_features", lambda B, N, H, d, o: 2 * B * H * N * o["num_features"], 4),  # phi(q), phi(k)
    "rfa": ("num_features", lambda B, N, H, d, o: 4 * B * H * N * o["num_features"], 2),  # sin and cos of q and k
    "t2r": ("num_features", lambda B, N, H, d, o: 2 * B * H * N * o["num_features"], 2),
    "lara": ("num_landmarks", lambda B, N, H, d, o: H * o["num_landmarks"] * d + B * H * min(N, o["num_landmarks"]) * N,
             1),  # the noise of every proposal, the weights of C' = min(C, N)
    "linformer": ("projected_dim", lambda B, N, H, d, o: B * H * N * o["projected_dim"], 3),  # the logits
    "reformer": ("num_hashes", lambda B, N, H, d, o: 2 * B * H * o["num_hashes"] * N * min(N, o["chunk_size"]), 4),
    "long_short": ("num_landmarks", lambda B, N, H, d, o: B * H * N * (min(N, o["window_size"]) + o["num_landmarks"]),
                   4),
}


def check_batch_memory(mechanism, options, x, num_heads):
    """EVAOptionError when one layer of `mechanism` would hold more than the machine's memory for the batch x
    (B x N x embed_dim), with the estimate and the option to lower: raised before the layer allocates it."""
    if mechanism not in HELD:
        return
    import torch

    option, held, training = HELD[mechanism]
    B, N, D = x.shape
    needed = held(B, N, num_heads, D // num_heads, options) * max(x.element_size(), 4)  # features in float32 at least
    needed *= training if torch.is_grad_enabled() else 1
    memory = machine_memory()
    if needed > memory:
        name = option_name(mechanism_option(mechanism, option), under_hydra())
        raise EVAOptionError(f"{name} {options[option]} needs at least {gigabytes(needed)} for one {mechanism} layer on a "
                             f"batch of {B} x {N} tokens, more than this machine's {gigabytes(memory)}: give a smaller "
                             f"{name} (or fewer tokens a batch)")


def _check_mechanism(args, role, mechanism, hydra, masked_lm=False, task=None):
    """Build the mechanism once on the meta device (no memory, no time): a bad option raises there, and its
    message is given back with the options named as the user writes them; parameters that would not fit in the
    machine's memory are refused with their size."""
    import torch

    from ..errors import option as option_of

    options = mechanism_options(args, mechanism, hydra)
    attributes = _attributes(role)
    if "max_positions" in options:  # a mechanism with learned length projections (Linformer): the model's inputs fit
        longest, (group, key) = longest_input(args, role, masked_lm, task)
        if longest > options["max_positions"]:
            option = option_name(mechanism_option(mechanism, "max_positions"), hydra)
            skipped = ""
            if key in ("max_source_positions", "max_target_positions") and _get(args, "tokens_per_sample") is None:
                skip = ("dataset.skip_invalid_size_inputs_valid_test=true" if hydra else
                        "--skip-invalid-size-inputs-valid-test")  # translation: sentence pairs longer than that
                skipped = (" (then fairseq-train skips the sentence pairs longer than that, and its validation and "
                           f"fairseq-generate stop at the first one unless given {skip}, which skips them too)")
            raise EVAOptionError(f"{option} ({options['max_positions']}) must be at least the model's longest input "
                                 f"({longest} positions): {mechanism} attention has a column of its length projections a "
                                 f"position; give {option} {longest} or more, or {option_of(group, key)} "
                                 f"{options['max_positions']} or less{skipped}")
    embed_dim, num_heads = _get(args, attributes["embed_dim"]), _get(args, attributes["num_heads"])
    dropout = _get(args, "attention_dropout") or 0.0
    try:
        with torch.device("meta"):
            module = registry.build(mechanism, embed_dim, num_heads, causal=role != ENCODER, dropout=dropout, **options)
    except ValueError as error:
        message = str(error)
        for option in options:
            message = re.sub(rf"\b{option}\b", option_name(mechanism_option(mechanism, option), hydra), message)
        raise EVAOptionError(f"{message} ({mechanism} attention in the {_WHERE[role]})") from None
    layers = _get(args, "encoder_layers" if role == ENCODER else "decoder_layers") or 1
    needed = 4 * layers * sum(t.numel() for t in (*module.parameters(), *module.buffers()))  # float32
    if needed > machine_memory():
        given = ", ".join(f"{option_name(mechanism_option(mechanism, o), hydra)} {v}" for o, v in options.items()
                          if registry.get(mechanism).defaults()[o] != v) or "its defaults"
        raise EVAOptionError(f"{mechanism} attention with {given} needs {gigabytes(needed)} for the parameters of its "
                             f"{layers} layers alone, more than this machine's {gigabytes(machine_memory())}")


def validate_eva_args(args, roles, hydra=False, task=None):
    """Run at model build time. `roles` maps a role to its attention attribute (encoder_attention or
    decoder_attention); `hydra`: name the options as fairseq-hydra-train's keys; `task`, where known, limits the
    inputs' length."""
    for role, attention in roles.items():
        kind = attention_kind(args, attention, hydra)
        refusal = registry.refusal(kind, causal=role != ENCODER)
        if refusal:
            raise EVAOptionError(f"{option_name(attention, hydra)} {kind}: {refusal}")
        if kind == "softmax":
            continue
        if kind not in EVA_LAYER:
            _check_mechanism(args, role, kind, hydra, masked_lm=list(roles) == [ENCODER], task=task)
            using = f"{option_name(attention, hydra)} {kind}"
            if (_get(args, "quant_noise_pq") or 0) > 0:
                raise EVAOptionError(f"{option_name('quant_noise_pq', hydra)} is not supported with {using}")
            if role != ENCODER and _get(args, "cross_self_attention"):
                raise EVAOptionError(f"{option_name('cross_self_attention', hydra)} is not supported with {using}")
            continue
        attributes = _attributes(role)

        def name(field):
            return option_name(attributes.get(field, field), hydra)

        options = EVAOptions.from_args(args, role, hydra, chunks=kind == "eva")
        try:
            options.check(_get(args, attributes["embed_dim"]), _get(args, attributes["num_heads"]), name)
        except EVAOptionError as error:
            raise EVAOptionError(f"{error} (EVA in the {_WHERE[role]})") from None
        using = f"{option_name(attention, hydra)} {kind}"
        if (_get(args, "quant_noise_pq") or 0) > 0:
            raise EVAOptionError(f"{option_name('quant_noise_pq', hydra)} is not supported by EVA attention ({using})")
        if role != ENCODER and _get(args, "cross_self_attention"):
            raise EVAOptionError(f"{option_name('cross_self_attention', hydra)} is not supported with {using}")


# ------------------------------------------------------------------ options that no self-attention uses

EVA_ATTRIBUTES = tuple(option.removeprefix("--").replace("-", "_") for option, _ in _COMMON + _DECODER)


def unread_fields(kind, role):
    """The EVAOptions fields of a role that its EVA layer of `kind` does not read: local attention has no chunks,
    and a causal layer's chunks are set by their size, not their number."""
    return {"num_chunks", "chunk_size"} if kind == "local" else {"num_chunks"} if role == DECODER else set()


def used_attributes(args, roles, hydra=False):
    """The attention options that configure some self-attention of the model: each role's attention option, the
    `--eva-*` options its EVA layer reads, a baseline's own options."""
    used = set(roles.values())
    for role, attention in roles.items():
        kind = attention_kind(args, attention, hydra)
        if kind in EVA_LAYER:
            used |= {_attributes(role)[field] for field in set(_attributes(role)) - unread_fields(kind, role)}
        elif kind != "softmax":
            used |= {mechanism_option(kind, option.name) for option in registry.get(kind).options}
    return used


def check_unused_options(args, roles, defaults, hydra=False):
    """EVAOptionError naming each option of a mechanism that no self-attention uses (`--performer-num-features` with
    lara, `--eva-num-chunks` with local attention), which would be ignored. A baseline's option counts as given when
    it is set; an `--eva-*` option when it differs from the architecture's default (`defaults`: fairseq-train fills
    those in as it parses the command line, so one given at its default value cannot be told from one not given, and
    is ignored without a word)."""
    used = used_attributes(args, roles, hydra)
    chosen = ", ".join(f"{option_name(a, hydra)} {attention_kind(args, a, hydra)}" for a in roles.values())
    unused = [a for name, m in registry.MECHANISMS.items() if name not in EVA_LAYER for a in
              (mechanism_option(name, o.name) for o in m.options) if a not in used and _get(args, a) is not None]
    unused += [a for a in EVA_ATTRIBUTES if a not in used and _get(args, a) is not None and
               _get(args, a) != _get(defaults, a)]
    if unused:
        given = ", ".join(f"{option_name(a, hydra)} {_get(args, a)}" for a in unused)
        raise EVAOptionError(f"{given}: no self-attention of this model uses {'it' if len(unused) == 1 else 'them'} "
                             f"({chosen}): leave {'it' if len(unused) == 1 else 'them'} out, or choose the mechanism "
                             f"{'it configures' if len(unused) == 1 else 'they configure'}")


# ------------------------------------------------------------------ what a checkpoint records

# how an EVA layer is computed, not what it computes: a trained model may run with another kernel or compile mode
NOT_RECORDED = ("eva_kernel", "eva_compile")


def attention_record(args, roles, hydra=False):
    """{model attribute: value}: each role's mechanism (`roles` maps a role to its attention attribute) and every
    option that configures it, defaults included. Written into the model's options when it is built, so that a
    checkpoint holds it (fairseq saves them), an evaluation tool builds the model it was trained as even after a
    default changed, and a run that loads it into another model is refused (fairseq_fixes.same_attention)."""
    record = {}
    for role, attention in roles.items():
        kind = attention_kind(args, attention, hydra)
        record[attention] = kind
        if kind in EVA_LAYER:
            attributes = _attributes(role)
            unused = {"causal", "dropout", "embed_dim", "num_heads"} | unread_fields(kind, role)
            for field, value in EVAOptions.from_args(args, role, hydra, chunks=kind == "eva").kwargs().items():
                if field not in unused and attributes[field] not in NOT_RECORDED:
                    record[attributes[field]] = value
        elif kind != "softmax":
            for option, value in mechanism_options(args, kind, hydra).items():
                record[mechanism_option(kind, option)] = value
    return record


def show_record(record, attributes, hydra=False):
    """`--decoder-attention elu, --performer-num-features 256`: the record's values of `attributes` as options."""
    def value(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    between = "=" if hydra else " "
    return ", ".join(f"{option_name(a, hydra)}{between}{value(record[a])}" if a in record else
                     f"no {option_name(a, hydra)}" for a in attributes)


# ------------------------------------------------------------------ unknown keys under fairseq-hydra-train


@functools.cache
def known_model_keys(model_class):
    """The `model.` keys that `model_class` reads: its command-line options (add_args, so a new option is
    known as soon as it is added) and whatever its architectures set (fairseq runs the architecture function
    on the config before the model is built)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    parser = argparse.ArgumentParser(add_help=False)
    model_class.add_args(parser)
    keys = {"_name", *vars(parser.parse_args([]))}
    for arch, registered in ARCH_MODEL_REGISTRY.items():
        if registered is model_class:
            defaults = argparse.Namespace()
            ARCH_CONFIG_REGISTRY[arch](defaults)
            keys.update(vars(defaults))
    return frozenset(keys)


def check_model_keys(cfg, model_class):
    """fairseq-hydra-train: raise EVAOptionError naming each `model.` key that `model_class` does not know,
    with the closest known key."""
    known = known_model_keys(model_class)
    arch = cfg.get("_name")
    problems = []
    for key in sorted(set(cfg.keys()) - known):
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean model.{close[0]}?)" if close else ""
        problems.append(f"model.{key} is not an option of {arch or 'this model'}{hint}")
    if problems:
        raise EVAOptionError("; ".join(problems))


# ------------------------------------------------------------------ the mechanisms' table (docs/usage.md)


def mechanism_table():
    """docs/usage.md's table of the attention choices, from the registry (a test keeps the page equal to it)."""
    lines = ["| `--encoder-attention` / `--decoder-attention` | directions | options (default) | multiply-adds per token |",
             "|---|---|---|---|"]
    for name, mechanism in registry.MECHANISMS.items():
        if name in EVA_LAYER:
            options = "the `--eva-*` options" + (" (no chunks)" if name == "local" else "")
        else:
            options = ", ".join(f"`--{mechanism_option(name, o.name).replace('_', '-')}` ({o.default})"
                                for o in mechanism.options) or "none"
        cost = " ".join((mechanism.cost.__doc__ or "").split()).split(". ")[0].removesuffix(".").replace("|", "\\|")
        lines.append(f"| `{name}`: {mechanism.description} | {', '.join(mechanism.directions)} | {options} | {cost} |")
    return "\n".join(lines)


def eva_option_table():
    """docs/usage.md's table of the attention options and the `--eva-*` options, from their help texts (a test keeps
    the page equal to it; the baselines' options are in mechanism_table)."""
    arch = "per architecture"
    defaults = argparse.Namespace()
    common_defaults(defaults, arch, arch, arch, arch)
    decoder_defaults(defaults, arch, arch, arch)
    lines = ["| option | default | meaning |", "|---|---|---|",
             "| `--encoder-attention NAME` | eva | translation and masked LM: the encoder self-attention, one of the "
             f"bidirectional choices above ({', '.join(registry.choices(registry.BIDIRECTIONAL))}) |",
             "| `--decoder-attention NAME` | translation: softmax; LM: eva | translation: the decoder self-attention; LM: "
             f"its self-attention; one of the causal choices above ({', '.join(registry.choices(registry.CAUSAL))}) |"]
    for option, keywords in _COMMON + _DECODER:
        value = getattr(defaults, option.removeprefix("--").replace("-", "_"))
        shown = str(value).lower() if isinstance(value, bool) else value
        meaning = keywords["help"].removeprefix("EVA: ").replace("|", "\\|")
        lines.append(f"| `{option} {keywords['metavar']}` | {shown} | {meaning} |")
    return "\n".join(lines)

