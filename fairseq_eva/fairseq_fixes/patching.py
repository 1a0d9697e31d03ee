"""Installing wrappers of fairseq's functions from an ordered list of rows, idempotently.

A target's chain is rebuilt from fairseq's own function each time rows are added, in the rows' order (a lower
layer inside a higher one, then the order of the rows), so what is installed depends only on which rows are, not
on how often or in what order `install` was called. fairseq may import a --user-dir more than once, and under
more than one module name: a row is known by its target, its fix and its wrapper's name, not by the function
object a fresh import makes, and the installed chain is recorded on the function that fairseq now holds.
"""

import dataclasses
import importlib
import re
from typing import Callable

from ..errors import UserError

FAIRSEQ_SERIES = (0, 12)  # the fairseq the fixes were written for: 0.12.x (ve-fairseq 0.12.3 in `make setup`)
CHAIN = "_fairseq_eva_chain"  # the attribute of an installed function that records its chain


@dataclasses.dataclass(frozen=True)
class Wrap:
    """One row: `target` (a qualified name, e.g. "fairseq.checkpoint_utils.load_checkpoint_to_cpu") becomes
    `wrapper(target)`; `fix` names what it is for (a module of fairseq_fixes, whose docstring says why)."""

    target: str
    wrapper: Callable
    fix: str

    @property
    def key(self):
        return self.target, self.fix, self.wrapper.__name__


@dataclasses.dataclass(frozen=True)
class Chain:
    original: Callable  # fairseq's own function
    rows: tuple  # ((layer, position), Wrap), innermost first
    function: Callable  # what the chain installed


class FairseqMismatch(UserError):
    """The installed fairseq is not one the fixes were written for."""


def locate(target):
    """(owner, attribute) of a qualified name: the longest prefix that imports as a module, then attributes."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name, None)
            if owner is None:
                return None, parts[-1]
        return owner, parts[-1]
    return None, parts[-1]


def _raw(owner, name):
    """The attribute as stored (a class's staticmethod object, not the function it gives)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
    return getattr(owner, name, None)


def _function(raw):
    return raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw


def check_fairseq(wraps):
    """FairseqMismatch, in one line, unless fairseq is 0.12.x and has every target of `wraps`."""
    import fairseq

    version = getattr(fairseq, "__version__", "unknown")
    found = re.match(r"(\d+)\.(\d+)", version)
    series = ".".join(map(str, FAIRSEQ_SERIES))
    if found is None or tuple(map(int, found.groups())) != FAIRSEQ_SERIES:
        raise FairseqMismatch(f"fairseq_eva's fixes of fairseq were written for fairseq {series}.x, and fairseq "
                              f"{version} is installed: install fairseq {series} (`make setup` installs ve-fairseq "
                              "0.12.3)")
    missing = []
    for target in dict.fromkeys(w.target for w in wraps):
        owner, name = locate(target)
        if owner is None or _raw(owner, name) is None:
            missing.append(target)
    if missing:
        raise FairseqMismatch(f"fairseq {version} has no {', '.join(missing)}, which fairseq_eva's fixes wrap: install "
                              f"fairseq {series} as `make setup` does (ve-fairseq 0.12.3)")


def installed(target):
    """The rows installed on `target`, innermost first (empty when fairseq's own function is there)."""
    owner, name = locate(target)
    chain = getattr(_function(_raw(owner, name)), CHAIN, None)
    return tuple(w for _, w in chain.rows) if chain else ()


def install(layers):
    """Install the rows of `layers`, {number: rows}: a lower number's rows inside a higher one's, and within a layer
    the order of its rows, innermost first (idempotent: a row already installed stays as it is). The numbers are
    the caller's, the same in every call, so that rows added later take their place in the chains."""
    ranked = [((i, j), w) for i, layer in layers.items() for j, w in enumerate(layer)]
    check_fairseq([w for _, w in ranked])
    for target in dict.fromkeys(w.target for _, w in ranked):
        owner, name = locate(target)
        raw = _raw(owner, name)
        current = _function(raw)
        chain = getattr(current, CHAIN, None)
        if chain is not None and chain.function is current:  # ours: rebuilt from fairseq's own function
            original, rows, have = chain.original, chain.rows, chain.rows
        else:  # fairseq's own, or a wrapper of others on top of ours (functools.wraps copied the record): kept
            original, rows, have = current, (), chain.rows if chain else ()
        have = {w.key for _, w in have}
        new = [(rank, w) for rank, w in ranked if w.target == target and w.key not in have]
        if not new:
            continue
        rows = tuple(sorted((*rows, *new), key=lambda row: row[0]))
        function = original
        for _, w in rows:
            function = w.wrapper(function)
        setattr(function, CHAIN, Chain(original, rows, function))
        setattr(owner, name, type(raw)(function) if isinstance(raw, (staticmethod, classmethod)) else function)
