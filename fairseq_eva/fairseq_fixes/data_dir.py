"""A data folder that is missing, or holds another task's data, stops with one line before the task reads it.

The translation, language-modeling and masked-LM tasks read their dictionaries from the first folder of the
data argument (`task.data`) when they are set up. A folder that is not there ends in a `FileNotFoundError`
traceback (`nodata/dict.txt`, or `os.listdir` of the folder); language-model data given to translation ends in
`Exception: Could not infer language pair`, and translation data given to a language model in another
FileNotFoundError. Here `tasks.setup_task` looks at the folder first (fairseq-train, fairseq-hydra-train,
fairseq-generate, fairseq-eval-lm, fairseq-interactive, the hub) and names what is wrong with it.

A split that is not in the folder (`--gen-subset tset`, a `--valid-subset` of another preparation) ends in a
`FileNotFoundError: Dataset not found: tset (DIR)` traceback: the task's load_dataset says instead which splits
the folder holds.
"""

import functools
import os
import re

from ..errors import UserError, task_option

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


def splits_in(folder):
    """The splits of fairseq-preprocess output in a folder: `valid` of valid.idx and of valid.en-de.en.idx."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted({n.split(".")[0] for n in names if n.endswith(".idx")})


def _naming_splits(load_dataset, data):
    @functools.wraps(load_dataset)
    def wrapper(split, *args, **kwargs):
        try:
            return load_dataset(split, *args, **kwargs)
        except FileNotFoundError as error:
            if not str(error).startswith("Dataset not found:") or not isinstance(data, str) or "://" in data:
                raise
            folder = data.split(os.pathsep)[0]
            found = splits_in(folder)
            held = f"it holds {', '.join(found)}" if found else "it holds no split (no *.idx files)"
            raise UserError(f"no split {split} in {folder} ({held}): give one of those (--gen-subset, "
                            "--valid-subset, --train-subset), or run fairseq-preprocess with that split") from None

    return wrapper


def _checking_data(setup_task):
    @functools.wraps(setup_task)
    def wrapper(cfg, *args, **kwargs):
        check(cfg)
        task = setup_task(cfg, *args, **kwargs)
        data = getattr(cfg, "data", None)
        if task is not None and hasattr(task, "load_dataset"):
            task.load_dataset = _naming_splits(task.load_dataset, data)
        return task

    return wrapper

