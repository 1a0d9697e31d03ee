"""A checkpoint path that is not a checkpoint file stops with one line naming it and the checkpoints beside it.

fairseq-generate, fairseq-eval-lm, fairseq-interactive and the hub's from_pretrained load their checkpoints
through `checkpoint_utils.load_model_ensemble_and_task`, which ends a missing file in a traceback
(`OSError: Model file not found: PATH`) and a folder in another (`IsADirectoryError`, from torch.load).
Both are the commonest slips with --path (a folder given for the file in it, a typo in the name), so
each path is looked at before fairseq does, and the message lists the checkpoints that are there.

The same slips elsewhere: fairseq-train with a --restore-file that is not there trains from scratch without a
word (a --finetune-from-model that is not there ends in a ValueError traceback), and the hub's from_pretrained
given a folder that is not there fails in `TypeError: expected str, bytes or os.PathLike object, not NoneType`.
"""

import functools
import glob
import os

from ..errors import UserError, option


def _checkpoints_in(folder):
    """The *.pt files of a folder, checkpoint_best.pt and checkpoint_last.pt first, at most 4 named."""
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(folder), "*.pt")))
    first = [n for n in ("checkpoint_best.pt", "checkpoint_last.pt") if n in found]
    names = first + [n for n in found if n not in first]
    shown = ", ".join(os.path.join(folder, n) for n in names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check(path, name="checkpoint", otherwise=""):
    """UserError when `path` (one checkpoint of --path, or the option `name`) is missing or a folder; `otherwise`
    says what fairseq would do instead of failing."""
    if "://" in path:  # not a local file: fairseq's PathManager handles it
        return
    if os.path.isdir(path):
        there = _checkpoints_in(path)
        if there:
            raise UserError(f"{name} {path} is a folder: give a checkpoint file in it ({there})")
        raise UserError(f"{name} {path} is a folder, with no checkpoint (*.pt) in it: give a checkpoint file "
                        "that fairseq-train saved (in its --save-dir)")
    if not os.path.exists(path):
        folder = os.path.dirname(path) or "."
        there = _checkpoints_in(folder) if os.path.isdir(folder) else ""
        if there:
            raise UserError(f"{name} {path} does not exist{otherwise}: {folder} holds {there}")
        raise UserError(f"{name} {path} does not exist{otherwise}: give a checkpoint file that fairseq-train saved "
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


def check_training_start(cfg, suffix=""):
    """UserError when fairseq-train's --restore-file or --finetune-from-model names no checkpoint file. A
    --restore-file that is the save dir's own checkpoint_last.pt may be missing: a first run starts afresh."""
    restore, last = cfg.restore_file, os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
    if restore != "checkpoint_last.pt":
        path = restore.replace(".pt", suffix + ".pt") if suffix else restore
        if os.path.abspath(path) != os.path.abspath(last):
            check(path, option("checkpoint", "restore_file"), " (fairseq-train would start afresh without a word)")
    elif cfg.finetune_from_model and not os.path.exists(last):
        check(cfg.finetune_from_model, option("checkpoint", "finetune_from_model"))


def _checking_start(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(cfg, trainer, *args, **kwargs):
        check_training_start(cfg, trainer.checkpoint_suffix)
        return load_checkpoint(cfg, trainer, *args, **kwargs)

    return wrapper


def check_model_folder(model_name_or_path, checkpoint_file, archive_map=None):
    """UserError when the hub's from_pretrained is given a local folder that is not there, or a checkpoint file
    in place of its folder."""
    if not isinstance(model_name_or_path, str) or "://" in model_name_or_path or (
            archive_map is not None and model_name_or_path in archive_map):
        return
    if os.path.isfile(model_name_or_path) and model_name_or_path.endswith(".pt"):
        folder, name = os.path.split(model_name_or_path)
        raise UserError(f"{model_name_or_path} is a checkpoint file: from_pretrained takes its folder and its name, "
                        f"from_pretrained({folder or '.'!r}, {name!r}, ...)")
    if not os.path.exists(model_name_or_path):
        raise UserError(f"model folder {model_name_or_path} does not exist: give the folder that holds the checkpoint "
                        f"(the --save-dir it was trained into), and the checkpoint's name ({checkpoint_file!r} here)")


def _checking_folder(from_pretrained):
    @functools.wraps(from_pretrained)
    def wrapper(model_name_or_path, checkpoint_file="model.pt", *args, **kwargs):
        check_model_folder(model_name_or_path, checkpoint_file, kwargs.get("archive_map", args[1] if len(args) > 1
                                                                          else None))
        return from_pretrained(model_name_or_path, checkpoint_file, *args, **kwargs)

    return wrapper

