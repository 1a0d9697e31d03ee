"""docs/usage.md's tables of the attention choices and of their options, generated from the registry's declarations
and the options' help texts (a test keeps the page equal to them)."""

import argparse

from ..attention import registry
from .architecture_defaults import eva_decoder_defaults, eva_defaults
from .flags import flag, option_flags
from .roles import DECODER, ENCODER


def mechanism_table():
    """The attention choices: directions, options with their defaults, cost."""
    lines = ["| `--encoder-attention` / `--decoder-attention` | directions | options (default) | multiply-adds per token |",
             "|---|---|---|---|"]
    for name, mechanism in registry.MECHANISMS.items():
        if mechanism.prefix == "eva":
            options = "the `--eva-*` options" + (" (no chunks)" if name == "local" else "")
        else:
            options = ", ".join(f"`{flag(f'{name}_{o.flag or o.name}')}` ({o.default})" for o in mechanism.options) or "none"
        cost = " ".join((mechanism.cost.__doc__ or "").split()).split(". ")[0].removesuffix(".").replace("|", "\\|")
        lines.append(f"| `{name}`: {mechanism.description} | {', '.join(mechanism.directions)} | {options} | {cost} |")
    return "\n".join(lines)


def eva_option_table():
    """The attention options and the `--eva-*` options, from their help texts (the baselines' options are in
    mechanism_table)."""
    arch = "per architecture"
    set_by_architecture = argparse.Namespace()
    eva_defaults(set_by_architecture, arch, arch, arch, arch, arch)
    eva_decoder_defaults(set_by_architecture, arch, arch, arch)
    declared = {f"eva_{o.flag or o.name}": o.default for o in registry.get("eva").options}
    lines = ["| option | default | meaning |", "|---|---|---|",
             "| `--encoder-attention NAME` | eva | translation and masked LM: the encoder self-attention, one of the "
             f"bidirectional choices above ({', '.join(registry.choices(registry.BIDIRECTIONAL))}) |",
             "| `--decoder-attention NAME` | translation: softmax; LM: eva | translation: the decoder self-attention; LM: "
             f"its self-attention; one of the causal choices above ({', '.join(registry.choices(registry.CAUSAL))}) |"]
    for name, keywords in option_flags((ENCODER, DECODER)):
        if not name.startswith("eva_"):
            continue
        value = getattr(set_by_architecture, name, declared.get(name))
        shown = str(value).lower() if isinstance(value, bool) else value
        meaning = keywords["help"].removeprefix("EVA: ").replace("|", "\\|")
        lines.append(f"| `{flag(name)} {keywords['metavar']}` | {shown} | {meaning} |")
    return "\n".join(lines)
