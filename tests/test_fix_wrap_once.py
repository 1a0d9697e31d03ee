"""fairseq_eva.fairseq_fixes.wrap_once: a fairseq function is wrapped once, however often (and under whatever module
name) fairseq_eva is imported."""

import functools
import types

from fairseq_eva.fairseq_fixes.wrap_once import wrap_once


def make_wrap():
    """A wrap as a fresh import of a module would define it: a new function object of the same name."""
    def _add_one(f):
        @functools.wraps(f)
        def wrapper(x):
            return f(x) + 1
        return wrapper
    return _add_one


def test_a_second_wrap_of_the_same_name_is_a_no_op_and_other_wraps_still_apply():
    owner = types.SimpleNamespace(f=lambda x: 10 * x)
    wrap_once(owner, "f", make_wrap())
    wrap_once(owner, "f", make_wrap())  # the module imported again
    assert owner.f(1) == 11

    def _double(f):
        return functools.wraps(f)(lambda x: 2 * f(x))

    wrap_once(owner, "f", _double)
    wrap_once(owner, "f", make_wrap())  # the mark survives the later wrap (functools.wraps copies it)
    wrap_once(owner, "f", _double)
    assert owner.f(1) == 22
