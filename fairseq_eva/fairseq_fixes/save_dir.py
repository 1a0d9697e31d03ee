"""A failed training run leaves no empty --save-dir behind, and a mistake of the user's found at a batch no crash.pt.

fairseq-train and fairseq-hydra-train make the checkpoint folder
(`checkpoint_utils.verify_checkpoint_directory`) before they build the task and the model, so a run that
stops on a bad option, --fp16 on a CPU, missing data or a refused launch leaves an empty folder that looks
like a run. The plugin wraps that function: the folders it makes (the save dir and any parent
that was missing) are removed at exit if nothing was written into them. A folder that was already there
is never removed.

fairseq-hydra-train with the configs' `hydra.run.dir: ${checkpoint.save_dir}` has hydra make the save dir,
and write `.hydra/` and `<job>.log` into it, before the plugin is loaded. So a save dir that holds only
those at exit, with a log that never reached "training on N devices" (a misspelled key, missing data), is
removed with them: nothing of a run was in it. hydra leaves no sign of whether the folder was there before;
an empty folder made beforehand goes too.

fairseq's trainer saves `crash.pt` when a training step raises (a checkpoint for debugging). A mistake in what the
user gave that can only be seen when a batch arrives (the plugin's UserError, e.g. a count of features whose memory
exceeds the machine's) is no crash: the save of crash.pt is skipped while one is being raised, so that the refusal
leaves nothing behind.
"""

import atexit
import functools
import os
import shutil
import sys

from ..errors import UserError


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


def hydra_files(save_dir):
    """The names of hydra's own files in save_dir when it is hydra's run dir, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        hydra = HydraConfig.get()
        run_dir, log = hydra.runtime.output_dir, f"{hydra.job.name}.log"
    except (ImportError, ValueError, AttributeError):
        return None
    if os.path.abspath(run_dir) != os.path.abspath(save_dir):
        return None
    return {hydra.output_subdir or ".hydra", log}


def remove_if_untrained(save_dir, names):
    """Remove save_dir if it holds nothing but hydra's files and its log shows that training never began."""
    try:
        if not set(os.listdir(save_dir)) <= names:
            return
        for name in names:
            path = os.path.join(save_dir, name)
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    if any("] - training on " in line for line in f):
                        return
        shutil.rmtree(save_dir)
    except OSError:
        return


def _cleaned_up(verify_checkpoint_directory):
    @functools.wraps(verify_checkpoint_directory)
    def wrapper(save_dir, *args, **kwargs):
        made = missing_folders(save_dir)
        if made:
            atexit.register(remove_if_empty, made)
        else:
            names = hydra_files(save_dir)
            if names is not None:
                atexit.register(remove_if_untrained, save_dir, names)
        return verify_checkpoint_directory(save_dir, *args, **kwargs)

    return wrapper


def _no_crash_file_for_user_errors(save_checkpoint):
    @functools.wraps(save_checkpoint)
    def wrapper(self, filename, *args, **kwargs):
        if os.path.basename(filename) == "crash.pt" and isinstance(sys.exc_info()[1], UserError):
            return None
        return save_checkpoint(self, filename, *args, **kwargs)

    return wrapper

