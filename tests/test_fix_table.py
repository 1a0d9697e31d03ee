"""fairseq_eva.fairseq_fixes: fairseq's functions are wrapped from one ordered table, once however often (and under
whatever module name) fairseq_eva is imported; a fairseq the fixes were not written for stops with one line; and
docs/design.md's table of the fixes is the table's."""

import functools
import sys
import types

import pytest

pytest.importorskip("fairseq")

from fairseq_eva import fairseq_fixes  # noqa: E402
from fairseq_eva.fairseq_fixes import patching  # noqa: E402
from fairseq_eva.fairseq_fixes.patching import FairseqMismatch, Wrap  # noqa: E402
from fairseq_helpers import REPO  # noqa: E402


@pytest.fixture
def owner(monkeypatch):
    """A module holding `f`, as a fairseq module holds the function a row wraps."""
    module = types.ModuleType("fairseq_eva_test_target")
    module.f = lambda x: 10 * x
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def make_wrap():
    """A wrap as a fresh import of a module would define it: a new function object of the same name."""
    def _add_one(f):
        @functools.wraps(f)
        def wrapper(x):
            return f(x) + 1
        return wrapper
    return _add_one


def _double(f):
    return functools.wraps(f)(lambda x: 2 * f(x))


def rows(*wraps, fix="test"):
    return [Wrap("fairseq_eva_test_target.f", wrap, fix) for wrap in wraps]


def test_a_second_wrap_of_the_same_name_is_a_no_op_and_other_wraps_still_apply(owner):
    patching.install({0: rows(make_wrap())})
    patching.install({0: rows(make_wrap())})  # the module imported again
    assert owner.f(1) == 11

    patching.install({0: rows(_double, fix="other")})
    patching.install({0: rows(make_wrap())})  # the chain is recorded on the function fairseq holds
    patching.install({0: rows(_double, fix="other")})
    assert owner.f(1) == 22


def test_a_chain_depends_on_its_rows_not_on_the_order_of_the_calls(owner):
    patching.install({1: rows(_double)})
    patching.install({0: rows(make_wrap())})  # a lower layer goes inside, though installed later
    assert owner.f(1) == 22
    assert [w.fix for w in patching.installed("fairseq_eva_test_target.f")] == ["test", "test"]


def test_a_wrapper_put_on_top_by_others_is_kept(owner):
    patching.install({0: rows(make_wrap())})
    owner.f = _double(owner.f)  # functools.wraps copies the chain's record onto it
    patching.install({0: rows(make_wrap())})
    assert owner.f(1) == 22


def test_the_table_is_installed_with_each_chain_in_its_order():
    fairseq_fixes.install()
    fairseq_fixes.install()
    targets = [w.target for w in fairseq_fixes.WRAPS]
    for target in dict.fromkeys(targets):
        chain = [w for w in fairseq_fixes.WRAPS if w.target == target]
        first = targets.index(target)
        assert targets[first : first + len(chain)] == [target] * len(chain), f"the rows of {target} are apart"
        assert patching.installed(target) == tuple(chain)
    names = {fix.name for fix in fairseq_fixes.FIXES}
    assert {w.fix for w in fairseq_fixes.WRAPS} <= names
    assert names == {name for name in dir(fairseq_fixes) if isinstance(getattr(fairseq_fixes, name), types.ModuleType)
                     and name not in ("patching", "state", "dataclasses")}


def test_a_harness_rows_go_inside_the_tables(monkeypatch):
    from fairseq.trainer import Trainer

    def noting(load_checkpoint):
        return functools.wraps(load_checkpoint)(lambda *a, **k: load_checkpoint(*a, **k))

    target = "fairseq.trainer.Trainer.load_checkpoint"
    monkeypatch.setattr(Trainer, "load_checkpoint", Trainer.load_checkpoint)  # put back afterwards
    fairseq_fixes.install(extra=[Wrap(target, noting, "harness")])
    assert [w.fix for w in patching.installed(target)] == ["harness", "same_attention", "wall_clock"]


def test_a_fairseq_the_fixes_were_not_written_for_stops_with_one_line(monkeypatch):
    import fairseq

    monkeypatch.setattr(fairseq, "__version__", "0.13.0")
    with pytest.raises(FairseqMismatch) as e:
        fairseq_fixes.install()
    assert "\n" not in str(e.value) and "fairseq 0.13.0 is installed" in str(e.value)
    monkeypatch.undo()
    missing = Wrap("fairseq.trainer.Trainer.no_such_method", make_wrap(), "test")
    with pytest.raises(FairseqMismatch, match=r"has no fairseq\.trainer\.Trainer\.no_such_method, which"):
        fairseq_fixes.install(extra=[missing])


def test_the_design_page_shows_the_table_of_fixes():
    page = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    start, end = "tests/test_fix_table.py keeps it equal -->\n", "<!-- end of the table of fixes -->"
    shown = page[page.index(start) + len(start) : page.index(end)].strip()
    assert shown == fairseq_fixes.fix_table(), (
        "docs/design.md's table of the fixes differs from fairseq_eva/fairseq_fixes: paste the output of\n"
        "python -c 'from fairseq_eva.fairseq_fixes import fix_table; print(fix_table())'")
