"""Ctrl-C during training ends with one line that says which checkpoint the same command resumes from.

Ctrl-C is the way to stop a fairseq-train run and resume it later, but fairseq ends it with Python's
KeyboardInterrupt traceback (84 lines from deep inside a training step) and says nothing about the checkpoint.
Here the checkpoints that the run loads and saves are followed, and an interrupt ends with one line, e.g.
`fairseq-train: interrupted at update 57; ckpt/checkpoint_last.pt holds update 50: the same command resumes from it`,
and exit status 130 (as for SIGINT). Ctrl-C during a checkpoint save takes effect when the save has ended. An
interrupt before training starts (while the data loads), or in another tool, ends in `PROG: interrupted`
(fairseq_eva/errors.py).
"""

import contextlib
import functools
import os
import signal
import sys
import threading

_run = {}  # this process's training run: its checkpoint config, trainer, and the newest checkpoint written


def _following_load(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, *args, **kwargs):
        result = load_checkpoint(cfg, trainer, *args, **kwargs)
        _run.update(cfg=cfg, trainer=trainer, resumed=trainer.get_num_updates(), written=None)
        return result

    return wrapper


def _following_write(save_checkpoint):
    @functools.wraps(save_checkpoint)
    def wrapper(self, filename, *args, **kwargs):
        result = save_checkpoint(self, filename, *args, **kwargs)
        _run["writing"] = (filename, self.get_num_updates())  # its copies (checkpoint_last.pt) follow
        return result

    return wrapper


def _following_save(save_checkpoint):
    @functools.wraps(save_checkpoint)
    def wrapper(*args, **kwargs):
        with _interrupt_held() as held:
            result = save_checkpoint(*args, **kwargs)
        if _run.get("writing"):
            _run["written"], _run["writing"] = _run["writing"], None
        if held:
            raise KeyboardInterrupt
        return result

    return wrapper


@contextlib.contextmanager
def _interrupt_held():
    """Hold Ctrl-C back while a checkpoint is saved (yields a list that is non-empty if one came): raised inside
    torch.save, a KeyboardInterrupt can be swallowed (the run goes on) or abort the process ("Fatal Python error:
    Aborted"). Held back, the save completes and the interrupt is raised after it. Main thread only."""
    held = []
    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler):  # e.g. ignored: left as it is
        yield held
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)


def resume_from(cfg, suffix=""):
    """The checkpoint that fairseq-train loads at its start (checkpoint_utils.load_checkpoint)."""
    if cfg.restore_file == "checkpoint_last.pt":
        return os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
    return cfg.restore_file


def interrupted_line():
    """The one line that ends an interrupted training run, or None outside training."""
    if "trainer" not in _run:
        return None
    cfg, trainer = _run["cfg"], _run["trainer"]
    prog = os.path.basename(sys.argv[0])
    now = f"{prog}: interrupted at update {trainer.get_num_updates()}"
    resume = resume_from(cfg, trainer.checkpoint_suffix)
    if _run["written"] is None:
        if _run["resumed"]:
            return f"{now}; {resume} holds update {_run['resumed']}: the same command resumes from it"
        return f"{now}, before the first checkpoint was saved: the same command starts again"
    written, updates = _run["written"]
    if cfg.restore_file == "checkpoint_last.pt" and not cfg.no_last_checkpoints:
        return f"{now}; {resume} holds update {updates}: the same command resumes from it"
    return f"{now}; {written} holds update {updates}: to resume from it, give --restore-file {written}"


def _reporting_interrupt(call_main):
    @functools.wraps(call_main)
    def wrapper(*args, **kwargs):
        try:
            return call_main(*args, **kwargs)
        except KeyboardInterrupt:
            line = interrupted_line()
            if line is None:
                raise
            print(line, file=sys.stderr, flush=True)
            sys.exit(130)

    return wrapper

