"""The command-line options of the attention choices, generated from the mechanisms' declarations (registry.py):
`--encoder-attention` / `--decoder-attention NAME`, EVA's and local attention's `--eva-*` options, the translation
decoder's own `--eva-decoder-*`, and `--NAME-OPTION` for every other mechanism's options. They are plain argparse
options of legacy fairseq models (added by the models' `add_args`, at the time fairseq parses, so a mechanism
registered before that is a choice too); under fairseq-hydra-train the same names are `model.` keys.

No option has an argparse default: an option left out is None, and the model's architecture sets the paper's value
where it has one (fairseq_eva/models/), the mechanism's declared default otherwise (plan.py)."""

import argparse

from ..attention import registry
from .roles import DECODER, ENCODER, LM, OWN, attribute

_TRUE = ("true", "t", "yes", "y", "1", "on")
_FALSE = ("false", "f", "no", "n", "0", "off")


def parse_bool(value):
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


def flag(attribute):
    return "--" + attribute.replace("_", "-")


def metavar(option):
    return "{" + ",".join(map(str, option.choices)) + "}" if option.choices else option.type.__name__.upper()


def help_text(mechanism, option):
    """EVA's options are set per architecture (the paper's window and chunks): their help names no default."""
    if mechanism.prefix == "eva":
        return f"EVA: {option.help}"
    return f"{mechanism.name} attention: {option.help} (default {option.default})"


def option_flags(roles):
    """[(attribute, argparse keywords)] of every mechanism's options in the model's `roles`, in the registry's order
    (EVA's first), then the translation decoder's own; an attribute shared by mechanisms (local attention's are
    EVA's) once."""
    flags = {}
    for mechanism in registry.MECHANISMS.values():
        for option in mechanism.options:
            name = attribute(None, mechanism, option)
            keywords = dict(metavar=metavar(option), help=help_text(mechanism, option),
                            type=parse_bool if option.type is bool else option.type)
            if option.choices:
                keywords["choices"] = list(option.choices)
            flags.setdefault(name, keywords)
    if DECODER in roles:
        eva = registry.get("eva")
        for option in eva.options:
            if option.name in OWN[DECODER]:
                own, text = OWN[DECODER][option.name]
                flags[own] = dict(metavar=metavar(option), help=text, type=parse_bool if option.type is bool else option.type)
    return list(flags.items())


def _choices(direction=None):
    return ", ".join(registry.choices(direction))


_LOCAL = "local (EVA's window without chunks, set by the same --eva-* options)"


def _add(parser, roles, choosers):
    for name, text in choosers:
        parser.add_argument(flag(name), choices=registry.choices(), metavar="{" + ",".join(registry.choices()) + "}",
                            help=text)
    for name, keywords in option_flags(roles):
        parser.add_argument(flag(name), **keywords)


def add_translation_args(parser):
    _add(parser, (ENCODER, DECODER), (
        ("encoder_attention", "self-attention of the encoder: eva (default), softmax (the baseline, fairseq's "
                              f"MultiheadAttention), {_LOCAL}, or a baseline: {_choices(registry.BIDIRECTIONAL)}"),
        ("decoder_attention", "self-attention of the decoder: softmax (default), eva (causal EVA, set by "
                              "--eva-decoder-window-size, --eva-decoder-chunk-size, --eva-decoder-overlap), or another "
                              f"causal choice: {_choices(registry.CAUSAL)}")))


def add_lm_args(parser):
    _add(parser, (LM,), (
        ("decoder_attention", "self-attention of the language model: eva (default, causal EVA set by "
                              "--eva-window-size, --eva-chunk-size, --eva-overlap), softmax (the baseline), or another "
                              f"causal choice: {_choices(registry.CAUSAL)}"),))


def add_masked_lm_args(parser):
    _add(parser, (ENCODER,), (
        ("encoder_attention", "self-attention of the encoder: eva (default), softmax (the baseline), "
                              f"{_LOCAL}, or a baseline: {_choices(registry.BIDIRECTIONAL)}"),))
