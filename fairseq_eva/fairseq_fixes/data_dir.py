"""A data folder that is missing, or holds another task's data, stops with one line before the task reads it.

The translation, language-modeling and masked-LM tasks read their dictionaries from the first folder of the
data argument (`task.data`) when they are set up. A folder that is not there ends in a `FileNotFoundError`
traceback (`nodata/dict.txt`, or `os.listdir` of the folder); language-model data given to translation ends in
`Exception: Could not infer language pair`, and translation data given to a language model in another
FileNotFoundError. Here `tasks.setup_task` looks at the folder first (fairseq-train, fairseq-hydra-train,
fairseq-generate, fairseq-eval-lm, fairseq-interactive, the hub) and names what is wrong with it.
"""

import functools
import os
import re

from ..errors import UserError, task_option
from .wrap_once import wrap_once

PREPROCESS = "give the folder that fairseq-preprocess wrote (its --destdir; a data_prep script's DEST)"


def _task_name(cfg):
    name = getattr(cfg, "task", None)  # argparse's Namespace
    return name if isinstance(name, str) else getattr(cfg, "_name", None)


def _pairs(names):
    """The language pairs of fairseq-preprocess's translation files (<split>.<src>-<tgt>.<lang>.bin), as
    fairseq's infer_language_pair finds them."""
    return [n.split(".")[1] for n in names if len(n.split(".")) >= 3 and len(n.split(".")[1].split("-")) == 2]


def check(cfg):
    """UserError when the data folder of a translation, language_modeling or masked_lm task cannot be read."""
    name, data = _task_name(cfg), getattr(cfg, "data", None)
    if name not in ("translation", "language_modeling", "masked_lm") or not isinstance(data, str) or not data:
        return
    if "://" in data:  # not a local folder: fairseq's PathManager reads it
        return
    folder = data.split(os.pathsep)[0]  # fairseq reads the dictionaries from the first folder
    if not os.path.exists(folder):
        raise UserError(f"data folder {folder} does not exist: {PREPROCESS}")
    if not os.path.isdir(folder):
        raise UserError(f"data folder {folder} is a file, not a folder: {PREPROCESS}")
    names = os.listdir(folder)
    dicts = sorted(n for n in names if re.fullmatch(r"dict\..+\.txt", n))
    task = task_option(name)
    if name == "translation":
        src, tgt = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
        if src is None or tgt is None:
            pairs = _pairs(names)
            if not pairs:
                if "dict.txt" in names:
                    raise UserError(f"{folder} holds a language model's data (dict.txt, no language pair), and "
                                    f"{task} reads a source and a target language: for a language model add "
                                    f"{task_option('language_modeling')}; for translation {PREPROCESS}")
                raise UserError(f"{folder} holds no fairseq-preprocess output (no <split>.<src>-<tgt>.* files): "
                                f"{PREPROCESS}")
            src, tgt = pairs[0].split("-")
        missing = [f"dict.{lang}.txt" for lang in (src, tgt) if f"dict.{lang}.txt" not in names]
        if missing:
            held = f" (it holds {', '.join(dicts)})" if dicts else ""
            raise UserError(f"{folder} has no {' or '.join(missing)} for the language pair {src}-{tgt}{held}: "
                            f"give --source-lang and --target-lang of its data, or {PREPROCESS}")
    elif "dict.txt" not in names:
        if dicts:
            raise UserError(f"{folder} holds translation data ({', '.join(dicts)}), and {task} reads one "
                            f"dictionary, dict.txt: give the data folder of a language model (fairseq-preprocess "
                            "--only-source wrote it)")
        raise UserError(f"{folder} holds no fairseq-preprocess output (no dict.txt): {PREPROCESS}")


def _checking_data(setup_task):
    @functools.wraps(setup_task)
    def wrapper(cfg, *args, **kwargs):
        check(cfg)
        return setup_task(cfg, *args, **kwargs)

    return wrapper


def install():
    """Check the data folder before a task is set up (idempotent)."""
    from fairseq import tasks

    wrap_once(tasks, "setup_task", _checking_data)
