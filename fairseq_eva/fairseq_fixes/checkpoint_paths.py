"""A --path that is not a checkpoint file stops with one line naming it and the checkpoints beside it.

fairseq-generate, fairseq-eval-lm, fairseq-interactive and the hub's from_pretrained load their checkpoints
through `checkpoint_utils.load_model_ensemble_and_task`, which ends a missing file in a traceback
(`OSError: Model file not found: PATH`) and a folder in another (`IsADirectoryError`, from torch.load).
Both are the commonest slips with --path (a folder given for the file in it, a typo in the name), so
each path is looked at before fairseq does, and the message lists the checkpoints that are there.
"""

import functools
import glob
import os

from ..errors import UserError
from .wrap_once import wrap_once


def _checkpoints_in(folder):
    """The *.pt files of a folder, checkpoint_best.pt and checkpoint_last.pt first, at most 4 named."""
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(folder), "*.pt")))
    first = [n for n in ("checkpoint_best.pt", "checkpoint_last.pt") if n in found]
    names = first + [n for n in found if n not in first]
    shown = ", ".join(os.path.join(folder, n) for n in names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check(path):
    """UserError when `path` (one checkpoint of --path) is missing or a folder."""
    if "://" in path:  # not a local file: fairseq's PathManager handles it
        return
    if os.path.isdir(path):
        there = _checkpoints_in(path)
        if there:
            raise UserError(f"checkpoint {path} is a folder: give a checkpoint file in it ({there})")
        raise UserError(f"checkpoint {path} is a folder, with no checkpoint (*.pt) in it: give a checkpoint file "
                        "that fairseq-train saved (in its --save-dir)")
    if not os.path.exists(path):
        folder = os.path.dirname(path) or "."
        there = _checkpoints_in(folder) if os.path.isdir(folder) else ""
        if there:
            raise UserError(f"checkpoint {path} does not exist: {folder} holds {there}")
        raise UserError(f"checkpoint {path} does not exist: give a checkpoint file that fairseq-train saved "
                        "(in its --save-dir)")


def _checking_paths(load_model_ensemble_and_task):
    @functools.wraps(load_model_ensemble_and_task)
    def wrapper(filenames, *args, **kwargs):
        suffix = kwargs.get("suffix", "")
        if kwargs.get("num_shards", 1) == 1:  # sharded checkpoints are files named after the path
            for path in filenames:
                check(path.replace(".pt", suffix + ".pt") if suffix else path)  # as fairseq names the file
        return load_model_ensemble_and_task(filenames, *args, **kwargs)

    return wrapper


def install():
    """Check the paths before fairseq's loader (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "load_model_ensemble_and_task", _checking_paths)
