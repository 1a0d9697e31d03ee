"""What an entry of the table of attention mechanisms (registry.py) is: the directions, Option, Memory, Mechanism.

A mechanism declares everything about itself once, in its own module, as one Mechanism (a tuple MECHANISMS):
its options (name, type, default, choices, help text), its cost per token, its display name, the option that sets
its cost (the benchmarks compare rows at equal cost through it) and what its memory grows with (the fairseq layer
refuses a batch that would not fit). The command-line flags, the help, the docs' tables, the checkpoint record and
the memory refusal are derived from these declarations (fairseq_eva/modules/).

Imports run one way: registry.py -> the mechanisms' modules -> this module, which imports neither.
"""

import dataclasses
import importlib
from typing import Any, Callable, Optional, Tuple

BIDIRECTIONAL, CAUSAL = "bidirectional", "causal"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a mechanism: the module's keyword `name`, its type, its default (the module's keyword
    default: a test keeps them equal), a help text and its choices. `flag`: its command-line name after the
    mechanism's prefix where that is not `name` (EVA's use_rpe is --eva-rpe)."""

    name: str
    type: Callable
    default: Any
    help: str
    choices: Tuple = ()
    flag: str = ""


@dataclasses.dataclass(frozen=True)
class Memory:
    """What one layer holds at least for a batch, beyond its parameters: `floats(B, N, H, d, options)` for B rows
    of N positions and H heads of d, the options that make it grow (the first is named when none was changed from
    its default), and how many times more a training step holds at least (forward and backward: measured 3 to 7
    times on a CPU)."""

    options: Tuple[str, ...]
    floats: Callable[..., float]
    training: float


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """An attention mechanism: `module` is "package.module:Class" (imported when first built)."""

    name: str
    module: str
    directions: Tuple[str, ...]
    options: Tuple[Option, ...]
    cost: Callable[..., float]  # cost(N, embed_dim, num_heads, causal=..., **options) -> MACs per token
    description: str
    fixed: Tuple[Tuple[str, Any], ...] = ()  # keywords always passed to the module (e.g. a feature map's name)
    title: str = ""  # its name in tables and on the pages ("Transformer-LS"); the registry name where empty
    knob: str = ""  # the option that sets its cost; none: one setting only
    memory: Optional[Memory] = None
    flags: str = ""  # the prefix of its command-line options where it is not `name` (local attention: eva's)
    # check(embed_dim, num_heads, causal=, dropout=, name=, **options): a ValueError naming the first bad option as
    # `name(option)` spells it; where None, building the module (on the meta device) checks its options
    check: Optional[Callable[..., None]] = None

    @property
    def prefix(self):
        return self.flags or self.name

    @property
    def display_name(self):
        return self.title or self.name

    def module_class(self):
        path, _, cls = self.module.partition(":")
        return getattr(importlib.import_module(path, __package__), cls)

    def defaults(self):
        return {o.name: o.default for o in self.options}

    def supports(self, causal):
        return (CAUSAL if causal else BIDIRECTIONAL) in self.directions

    def build(self, embed_dim, num_heads, causal=False, dropout=0.0, **options):
        """The module, with the options not given at their defaults (the direction is checked by the table,
        registry.build, which can name the choices that support it)."""
        unknown = set(options) - {o.name for o in self.options}
        if unknown:
            raise ValueError(f"{self.name} has no option {', '.join(sorted(unknown))}; its options: "
                             f"{', '.join(o.name for o in self.options) or 'none'}")
        kwargs = {**self.defaults(), **options, **dict(self.fixed)}
        return self.module_class()(embed_dim, num_heads, causal=causal, dropout=dropout, **kwargs)

    def macs_per_token(self, N, embed_dim, num_heads, causal=False, **options):
        return self.cost(N, embed_dim, num_heads, causal=causal, **{**self.defaults(), **options})

    def held_bytes(self, B, N, num_heads, head_dim, element_size, training, **options):
        """Bytes one layer holds at least for a batch of B x N (0 for a mechanism whose memory no option grows)."""
        if self.memory is None:
            return 0
        floats = self.memory.floats(B, N, num_heads, head_dim, {**self.defaults(), **options})
        return floats * max(element_size, 4) * (self.memory.training if training else 1)  # features in float32 at least
