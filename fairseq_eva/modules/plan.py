"""Options resolve once: after the architecture has filled in its defaults, each self-attention of a model becomes
one immutable AttentionPlan (its role, its mechanism, and every option of the mechanism with its value). The checks,
the unused-option refusal, the checkpoint record and the layers read the plans; the layers build every mechanism,
EVA's included, through the registry from them.

A model resolves its plans in `prepare_args` and builds its layers inside `building(plans)`; a layer built outside
a model (a test, another library's model) resolves its own from the config it is given."""

import contextlib
import contextvars
import dataclasses
from typing import Any, Tuple

from ..attention import registry
from ..errors import AttentionOptionError
from .flags import parse_bool
from .roles import ENCODER, WHERE, attribute, causal, option_name, reads, side

_building = contextvars.ContextVar("fairseq_eva_attention_plans", default=None)


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """One self-attention: its role, its mechanism (`kind`) and the mechanism's options, each with its value."""

    role: str
    kind: str
    options: Tuple[Tuple[str, Any], ...] = ()

    @property
    def causal(self):
        return causal(self.role)

    @property
    def mechanism(self):
        return registry.get(self.kind)

    @property
    def where(self):
        return WHERE[self.role]

    def kwargs(self):
        """The module's keyword arguments besides the sizes, the direction and the dropout."""
        return {**dict(self.options), **dict(self.mechanism.fixed)}

    def attributes(self):
        """{option: the model attribute that sets it} of the options this plan's role reads."""
        return {o.name: attribute(self.role, self.mechanism, o) for o in self.mechanism.options if reads(self.role, o)}

    def option_name(self, option, hydra=False):
        """How the user spells `option` of this plan (`--eva-window-size`, `model.performer_num_features`)."""
        return option_name(self.attributes().get(option, option), hydra)


def get(args, name):
    try:
        return getattr(args, name)
    except AttributeError:  # includes omegaconf's ConfigAttributeError
        return None


def attention_kind(cfg, attribute, hydra=False):
    """The mechanism's name from encoder_attention / decoder_attention; AttentionOptionError naming the option."""
    value = get(cfg, attribute)
    if value not in registry.MECHANISMS:
        raise AttentionOptionError(f"{option_name(attribute, hydra)} must be one of {', '.join(registry.MECHANISMS)}; "
                                   f"got {value!r}")
    return value


def _value(option, given, name):
    """The option's value from the model's: its declared default where unset; text (a command line, an override)
    as its type. The module checks the value itself."""
    if given is None:
        return option.default
    if option.type is bool:
        try:
            return parse_bool(given)
        except Exception as error:
            raise AttentionOptionError(f"{name}: {error}") from None
    if isinstance(given, str) and option.type is not str:
        try:
            return option.type(given)
        except ValueError:
            raise AttentionOptionError(f"{name} must be a {option.type.__name__}, got {given!r}") from None
    return given


def resolve(args, role, attention, hydra=False):
    """The AttentionPlan of `role`, whose mechanism the attribute `attention` chooses, from a model's args."""
    kind = attention_kind(args, attention, hydra)
    mechanism = registry.get(kind)
    options = []
    for option in mechanism.options:
        if not reads(role, option):
            options.append((option.name, option.default))
            continue
        name = attribute(role, mechanism, option)
        options.append((option.name, _value(option, get(args, name), option_name(name, hydra))))
    return AttentionPlan(role, kind, tuple(options))


def resolve_all(args, roles, hydra=False):
    """{role: AttentionPlan} of a model; `roles` maps each role to the attribute that chooses its mechanism."""
    return {role: resolve(args, role, attention, hydra) for role, attention in roles.items()}


def sizes(args, role):
    """(embed_dim, num_heads, layers) of a role's self-attentions, from the model's args."""
    return tuple(get(args, f"{side(role)}_{key}") for key in ("embed_dim", "attention_heads", "layers"))


@contextlib.contextmanager
def building(plans):
    """The layers built inside read these plans."""
    token = _building.set(plans)
    try:
        yield
    finally:
        _building.reset(token)


def plan_for(cfg, role):
    """The plan of `role` of the model being built, or, outside a model's build, resolved from `cfg`."""
    plans = _building.get()
    if plans is not None and role in plans:
        return plans[role]
    return resolve(cfg, role, "encoder_attention" if role == ENCODER else "decoder_attention")
