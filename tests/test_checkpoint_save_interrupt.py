"""Ctrl-C at any point of a checkpoint save leaves each checkpoint file either its old complete self or the new
complete one. The save is the write sequence of fairseq's `checkpoint_utils.save_checkpoint`: the new epoch
checkpoint (`torch_persistent_save`, a temporary file renamed into place), then its copy to checkpoint_last.pt
(`PathManager.copy`, atomic with the plugin). Python delivers SIGINT between lines, so the KeyboardInterrupt is
raised before each line the save runs, in turn, from a trace function, each in a forked child."""

import os
import sys

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq import checkpoint_utils  # noqa: E402
from fairseq.file_io import PathManager  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (installs the atomic copy)
from fairseq_eva.fairseq_fixes import checkpoint_safety  # noqa: E402


def state(update):
    return {"model": {"w": torch.full((1000,), float(update))}, "extra_state": {"update": update}}


def save(folder):
    """fairseq's writes for the save of update 2 (epoch checkpoint, then checkpoint_last.pt)."""
    new = str(folder / "checkpoint2.pt")
    checkpoint_utils.torch_persistent_save(state(2), new)
    assert PathManager.copy(new, str(folder / "checkpoint_last.pt"), overwrite=True)


def interrupted_save(folder, line):
    """Run `save` in a forked child, raising KeyboardInterrupt before its `line`-th line; False when the save
    has fewer lines. (A child, because an interrupt inside torch.save's zip writer can abort the process.)"""
    pid = os.fork()
    if pid == 0:
        count = 0

        def trace(frame, event, arg):
            nonlocal count
            if event == "line":
                count += 1
                if count == line:
                    raise KeyboardInterrupt
            return trace

        sys.settrace(trace)
        try:
            save(folder)
        except KeyboardInterrupt:
            os._exit(1)
        os._exit(0 if count < line else 2)  # 2: raised where something caught it, and the save went on
    _, status = os.waitpid(pid, 0)
    return status != 0


def updates_held(folder):
    """{checkpoint file: the update it holds, or None when it does not load}."""
    held = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".pt"):
            try:
                held[name] = checkpoint_safety.load(str(folder / name))["extra_state"]["update"]
            except Exception:
                held[name] = None
    return held


def interrupt_everywhere(tmp_path, first=1):
    """The checkpoint files after an interrupt before each line of the save from `first` on, one save each;
    then (None, the files after the whole save)."""
    for line in range(first, 100_000):
        folder = tmp_path / str(line)
        folder.mkdir()
        torch.save(state(1), folder / "checkpoint1.pt")
        torch.save(state(1), folder / "checkpoint_last.pt")
        interrupted = interrupted_save(folder, line)
        yield (updates_held(folder), None) if interrupted else (None, updates_held(folder))
        if not interrupted:
            return


@pytest.mark.slow
def test_an_interrupt_anywhere_in_a_save_leaves_old_or_new_complete_checkpoints(tmp_path):
    *interrupted, (_, finished) = interrupt_everywhere(tmp_path)
    outcomes = [held for held, _ in interrupted]
    assert finished == {"checkpoint1.pt": 1, "checkpoint2.pt": 2, "checkpoint_last.pt": 2}
    assert len(outcomes) > 50  # interrupted inside torch.save and the copy, not only around them
    for held in outcomes:
        assert held["checkpoint1.pt"] == 1 and held["checkpoint_last.pt"] in (1, 2), held
        assert held.get("checkpoint2.pt", 2) == 2, held
    assert {"checkpoint1.pt": 1, "checkpoint2.pt": 2, "checkpoint_last.pt": 1} in outcomes  # between the two


@pytest.mark.slow
def test_fairseqs_own_copy_can_leave_a_broken_checkpoint_last(tmp_path, monkeypatch):
    monkeypatch.setattr(PathManager, "copy", staticmethod(checkpoint_safety._fairseq_copy))
    lines = 0

    def count(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return count

    (tmp_path / "count").mkdir()
    sys.settrace(count)
    save(tmp_path / "count")
    sys.settrace(None)
    # the copy is the end of the save: interrupt its last lines
    assert any(held and held["checkpoint_last.pt"] is None for held, _ in interrupt_everywhere(tmp_path, lines - 80))


def test_ctrl_c_during_a_save_takes_effect_when_the_save_has_ended(tmp_path):
    """fairseq-train's save goes through interrupt._following_save: a SIGINT that arrives during it is held back,
    the save completes, and the KeyboardInterrupt comes after it."""
    import signal

    from fairseq_eva.fairseq_fixes import interrupt

    def save():
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, delivered at once
        torch.save(state(2), tmp_path / "checkpoint_last.pt")

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores it)
    try:
        with pytest.raises(KeyboardInterrupt):
            interrupt._following_save(save)()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert updates_held(tmp_path) == {"checkpoint_last.pt": 2}
