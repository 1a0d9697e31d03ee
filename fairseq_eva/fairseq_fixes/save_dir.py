"""A failed training run leaves no empty --save-dir behind.

fairseq-train and fairseq-hydra-train make the checkpoint folder
(`checkpoint_utils.verify_checkpoint_directory`) before they build the task and the model, so a run that
stops on a bad option, --fp16 on a CPU, missing data or a refused launch leaves an empty folder that looks
like a run. Importing fairseq_eva wraps that function: the folders it makes (the save dir and any parent
that was missing) are removed at exit if nothing was written into them. A folder that was already there
is never removed.
"""

import atexit
import functools
import os

from .wrap_once import wrap_once


def missing_folders(path):
    """The folders of `path` that do not exist yet, deepest first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def remove_if_empty(folders):
    """Remove each folder, deepest first, while it is empty (rmdir refuses a folder with anything in it)."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


def _cleaned_up(verify_checkpoint_directory):
    @functools.wraps(verify_checkpoint_directory)
    def wrapper(save_dir, *args, **kwargs):
        made = missing_folders(save_dir)
        if made:
            atexit.register(remove_if_empty, made)
        return verify_checkpoint_directory(save_dir, *args, **kwargs)

    return wrapper


def install():
    """Wrap fairseq's verify_checkpoint_directory (idempotent)."""
    from fairseq import checkpoint_utils

    wrap_once(checkpoint_utils, "verify_checkpoint_directory", _cleaned_up)
