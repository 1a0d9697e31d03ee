"""What an entry of the table of attention mechanisms (registry.py) is: the directions, Option and Mechanism.

Each module that implements a mechanism declares its entries with these types (a tuple MECHANISMS) and
registry.py imports them into its table, so imports run one way: registry.py -> the mechanisms' modules ->
this module, which imports neither.
"""

import dataclasses
import importlib
from typing import Any, Callable, Tuple

BIDIRECTIONAL, CAUSAL = "bidirectional", "causal"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a mechanism: the module's keyword `name`, its type, the paper's default, a help text."""

    name: str
    type: Callable
    default: Any
    help: str
    choices: Tuple = ()


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
