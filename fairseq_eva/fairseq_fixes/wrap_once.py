"""Wrap a fairseq function once.

fairseq may import a --user-dir more than once (and under more than one module name), so each wrap is
marked on the function it returns, by the wrap's name, and a function that already carries the mark is
left as it is. functools.wraps copies the marks of the functions a wrapper wraps.
"""


def wrap_once(owner, name, wrap):
    """owner.name = wrap(owner.name), unless a wrap of the same name is already there."""
    current = getattr(owner, name)
    mark = f"fairseq_eva_{wrap.__name__.lstrip('_')}"
    if not getattr(current, mark, False):
        wrapped = wrap(current)
        setattr(wrapped, mark, True)
        setattr(owner, name, wrapped)
