"""What is checked when a model is built, before any batch: each plan's direction and options (named as the user
wrote them: `--eva-window-size` under fairseq-train, which prints one line, `fairseq-train: error: ...`, like
argparse (see fairseq_eva.errors); `model.eva_window_size` under fairseq-hydra-train, without a traceback), the
inputs a mechanism with learned positions can take, its parameters against the machine's memory, the fairseq
options the plugin's layers do not support, and options that no self-attention of the model uses."""

import re

from ..attention import registry
from ..errors import AttentionOptionError
from ..errors import option as fairseq_option
from . import memory
from .plan import attention_kind, get, sizes
from .roles import ENCODER, WHERE, attribute, option_name, side


def _label(plan):
    return "EVA" if plan.mechanism.prefix == "eva" else f"{plan.kind} attention"


def _spelled(message, plan, hydra):
    """A module's message with its option names (`num_features`) as the user writes them (`--performer-num-features`)."""
    names = {o: plan.option_name(o, hydra) for o, _ in plan.options}
    if not names:
        return message
    pattern = r"(?<![\w-])(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")(?![\w-])"
    return re.sub(pattern, lambda m: names[m.group(1)], message)


def longest_input(args, role, masked_lm=False, task=None):
    """(the most positions an input of a self-attention of `role` can have, the option that sets it as (group, key)):
    the model's positions (fairseq's default where unset) or, where the task is known and allows fewer, the task's."""
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    if masked_lm:
        limits = [(get(args, "max_positions"), ("model", "max_positions"))]
    elif role == ENCODER:
        limits = [(get(args, "max_source_positions") or DEFAULT_MAX_SOURCE_POSITIONS, ("model", "max_source_positions"))]
    else:
        limits = [(get(args, "max_target_positions") or get(args, "tokens_per_sample") or DEFAULT_MAX_TARGET_POSITIONS,
                   ("model", "max_target_positions"))]
    if task is not None:
        allowed = task.max_positions()
        if isinstance(allowed, tuple):  # translation: (source, target)
            limits.append((allowed[0], ("task", "max_source_positions")) if role == ENCODER else
                          (allowed[1], ("task", "max_target_positions")))
        else:
            limits.append((allowed, ("task", "tokens_per_sample")))
    return min(((n, where) for n, where in limits if isinstance(n, int)), key=lambda limit: limit[0])


def _check_positions(args, plan, hydra, masked_lm, task):
    """A mechanism with learned length projections (Linformer's max_positions) must fit the model's inputs."""
    options = dict(plan.options)
    if "max_positions" not in options:
        return
    longest, (group, key) = longest_input(args, plan.role, masked_lm, task)
    if longest > options["max_positions"]:
        name = plan.option_name("max_positions", hydra)
        skipped = ""
        if key in ("max_source_positions", "max_target_positions") and get(args, "tokens_per_sample") is None:
            skip = ("dataset.skip_invalid_size_inputs_valid_test=true" if hydra else
                    "--skip-invalid-size-inputs-valid-test")  # translation: sentence pairs longer than that
            skipped = (" (then fairseq-train skips the sentence pairs longer than that, and its validation and "
                       f"fairseq-generate stop at the first one unless given {skip}, which skips them too)")
        raise AttentionOptionError(f"{name} ({options['max_positions']}) must be at least the model's longest input "
                                   f"({longest} positions): {plan.kind} attention has a column of its length projections "
                                   f"a position; give {name} {longest} or more, or {fairseq_option(group, key)} "
                                   f"{options['max_positions']} or less{skipped}")


def check_plan(args, plan, hydra=False, masked_lm=False, task=None):
    """Raise AttentionOptionError at the first problem of one self-attention's plan."""
    import torch

    reason = registry.refusal(plan.kind, causal=plan.causal)
    attention = "encoder_attention" if plan.role == ENCODER else "decoder_attention"
    if reason:
        raise AttentionOptionError(f"{option_name(attention, hydra)} {plan.kind}: {reason}")
    if plan.kind == "softmax":
        return
    mechanism = plan.mechanism
    _check_positions(args, plan, hydra, masked_lm, task)
    embed_dim, num_heads, layers = sizes(args, plan.role)
    dropout = get(args, "attention_dropout") or 0.0
    try:
        if mechanism.check is not None:
            model_options = {"embed_dim": f"{side(plan.role)}_embed_dim", "num_heads": f"{side(plan.role)}_attention_heads",
                             "dropout": "attention_dropout"}

            def name(option):
                return option_name(model_options[option], hydra) if option in model_options else plan.option_name(
                    option, hydra)

            mechanism.check(embed_dim, num_heads, causal=plan.causal, dropout=dropout, name=name, **plan.kwargs())
        with torch.device("meta"):
            module = registry.build(plan.kind, embed_dim, num_heads, causal=plan.causal, dropout=dropout,
                                    **dict(plan.options))
    except AttentionOptionError:
        raise
    except ValueError as error:
        message = str(error) if mechanism.check is not None else _spelled(str(error), plan, hydra)
        raise AttentionOptionError(f"{message} ({_label(plan)} in the {WHERE[plan.role]})") from None
    memory.check_parameters(plan, module, layers or 1, hydra)
    using = f"{option_name(attention, hydra)} {plan.kind}"
    if (get(args, "quant_noise_pq") or 0) > 0:
        raise AttentionOptionError(f"{option_name('quant_noise_pq', hydra)} is not supported with {using}")
    if plan.causal and get(args, "cross_self_attention"):
        raise AttentionOptionError(f"{option_name('cross_self_attention', hydra)} is not supported with {using}")


def check_plans(args, plans, hydra=False, task=None):
    """Check every plan of a model; `task`, where known, limits the inputs' length."""
    for plan in plans.values():
        check_plan(args, plan, hydra, masked_lm=list(plans) == [ENCODER], task=task)


def used_attributes(plans, roles):
    """The attention options that configure some self-attention of the model: each role's attention option and the
    options its mechanism reads."""
    used = set(roles.values())
    for plan in plans.values():
        used |= set(plan.attributes().values())
    return used


def model_attributes(roles):
    """Every attention option of a model with these roles, in the order of its flags."""
    from .flags import option_flags

    return [name for name, _ in option_flags(roles)]


def check_unused_options(args, plans, roles, defaults, hydra=False):
    """AttentionOptionError naming each option of a mechanism that no self-attention uses (`--performer-num-features`
    with lara, `--eva-num-chunks` with local attention), which would be ignored. An option counts as given when it
    is set and differs from the value it would have had: the architecture's default (`defaults`: fairseq-train fills
    those in as it parses the command line, so one given at that value cannot be told from one not given), or the
    mechanism's declared default."""
    used = used_attributes(plans, roles)
    declared = {}
    for mechanism in registry.MECHANISMS.values():
        for option in mechanism.options:
            for role in plans:
                declared.setdefault(attribute(role, mechanism, option), option.default)
    unused = []
    for name in model_attributes(roles):
        value = get(args, name)
        if name in used or value is None:
            continue
        default = get(defaults, name)
        if value != (declared.get(name) if default is None else default):
            unused.append(name)
    if unused:
        given = ", ".join(f"{option_name(a, hydra)} {get(args, a)}" for a in unused)
        chosen = ", ".join(f"{option_name(a, hydra)} {attention_kind(args, a, hydra)}" for a in roles.values())
        it = "it" if len(unused) == 1 else "them"
        raise AttentionOptionError(f"{given}: no self-attention of this model uses {it} ({chosen}): leave {it} out, or "
                                   f"choose the mechanism {'it configures' if len(unused) == 1 else 'they configure'}")
