"""A model that does not fit its task, its data or its options stops with one line when it is built.

fairseq builds whatever architecture it is given for whatever task it runs, and the mismatch shows up later,
far from its cause:
- a language model trained on translation data: `TypeError: ... got multiple values for argument
  'prev_output_tokens'` at the first batch, after a `crash.pt` was written into the save dir;
- a translation model for a language-modeling task (fairseq-eval-lm on a translation checkpoint):
  `AttributeError: 'TransformerEVAModel' object has no attribute 'supported_targets'`;
- a language model's checkpoint in fairseq-generate, whose task is translation unless told otherwise:
  `AssertionError: cannot specify cutoff larger than vocab size` (an adaptive softmax) or a size mismatch;
- a checkpoint with the dictionaries of another data folder: `RuntimeError: Error(s) in loading state_dict
  ... size mismatch for encoder.embed_tokens.weight`;
- --tokens-per-sample above the positions the model has: an IndexError after fairseq's warning that samples
  are skipped (training), or fairseq-eval-lm scoring 0 tokens and printing perplexity 1.00.

`models.build_model` is where the task and the model meet (fairseq-train and fairseq-hydra-train, and every
checkpoint loaded by fairseq-generate, -eval-lm, -interactive or the hub): the model's kind is checked against
the task's before it is built, a checkpoint's embedding sizes against the task's dictionaries, and after it
is built the task's block size against the model's positions. What a checkpoint holds is noted when
`checkpoint_utils.load_checkpoint_to_cpu` reads it (its path, its task, the rows of its embeddings), just
before fairseq builds its model.
"""

import collections
import functools
import os
import re

from ..errors import UserError, option, program, task_option, under_hydra
from .state import (
    building,
    building_from_checkpoint,  # noqa: F401  (importable from here, its former home)
    note_checkpoint,
    take_checkpoint,
)

Kind = collections.namedtuple("Kind", "one many adjective task arch")
# the kinds of model, named in the messages: the task that trains each, and one of the plugin's architectures of it
KINDS = {"translation": Kind("a translation model", "translation models", "a translation", "translation",
                             "transformer_eva_tiny"),
         "language model": Kind("a language model", "language models", "a language-model", "language_modeling",
                                "transformer_lm_eva_tiny"),
         "masked language model": Kind("a masked language model", "masked language models", "a masked-LM",
                                       "masked_lm", "roberta_eva_tiny")}


def _get(cfg, key):
    return cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)


def embedding_rows(model_state):
    """Rows of the token embeddings in a checkpoint's state dict: {"encoder": n, "decoder": n} for those
    that are there (an adaptive input counts the rows of all its bands)."""
    rows = {}
    for part in ("encoder", "decoder"):
        for key in (f"{part}.embed_tokens.weight", f"{part}.sentence_encoder.embed_tokens.weight"):
            if key in model_state:
                rows[part] = model_state[key].shape[0]
        band = re.compile(rf"{part}\.embed_tokens\.embeddings\.\d+\.0\.weight")
        bands = [v.shape[0] for k, v in model_state.items() if band.fullmatch(k)]
        if part not in rows and bands:
            rows[part] = sum(bands)
    return rows


def trained_task(state):
    """The task name and data folder a checkpoint was trained with (its cfg, or an old checkpoint's args)."""
    if state.get("cfg") is not None:
        task = _get(state["cfg"], "task")
        return _get(task, "_name"), _get(task, "data")
    args = state.get("args")
    return _get(args, "task"), _get(args, "data")


def _noting_checkpoint(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        loaded = load_checkpoint_to_cpu(path, *args, **kwargs)
        task, data = trained_task(loaded)
        note_checkpoint(path=path, task=task, data=data, rows=embedding_rows(loaded.get("model") or {}))
        return loaded

    return wrapper


def model_class(cfg):
    """The model class that fairseq's build_model picks for cfg, or None."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    name = _get(cfg, "_name") or _get(cfg, "arch")
    return ARCH_MODEL_REGISTRY.get(name) or MODEL_REGISTRY.get(name), name


def model_kind(cls):
    from fairseq.models import FairseqEncoderDecoderModel, FairseqEncoderModel, FairseqLanguageModel

    if issubclass(cls, FairseqLanguageModel):
        return "language model"
    if issubclass(cls, FairseqEncoderDecoderModel):
        return "translation"
    if issubclass(cls, FairseqEncoderModel):
        return "masked language model"
    return None


def task_kind(task):
    """The kind of model a task trains and evaluates: translation, language model, masked language model."""
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.masked_lm import MaskedLMTask
    from fairseq.tasks.translation import TranslationTask

    for kind, cls in (("translation", TranslationTask), ("language model", LanguageModelingTask),
                      ("masked language model", MaskedLMTask)):
        if isinstance(task, cls):
            return kind
    return None


def task_options(task):
    """A task's options: `cfg` of hydra-configured tasks, `args` of legacy ones (language_modeling)."""
    return getattr(task, "cfg", None) or getattr(task, "args", None)


def _task_name(task):
    from fairseq.tasks import TASK_REGISTRY

    names = [name for name, cls in TASK_REGISTRY.items() if cls is type(task)]
    return names[0] if names else type(task).__name__


def check_kind(cfg, task, checkpoint):
    """UserError when the model that cfg names is of another kind than the task's (checkpoint: what
    `_noting_checkpoint` noted of the checkpoint it comes from, or None in training)."""
    cls, arch = model_class(cfg)
    needs = task_kind(task)
    kind = model_kind(cls) if cls is not None else None
    if needs is None or kind is None or kind == needs:
        return
    have, need = KINDS[kind], KINDS[needs]
    if checkpoint is None:
        arch_option = "model._name" if under_hydra() else "--arch"
        raise UserError(f"{arch_option} {arch} is {have.one}, and {task_option(_task_name(task))} trains {need.many}: "
                        f"give {need.adjective} {arch_option} (e.g. {need.arch}), or {task_option(have.task)} and "
                        f"its data for {arch}")
    trained = checkpoint.get("task") or have.task
    if program() == "fairseq-eval-lm":
        fix = "fairseq-eval-lm scores language models only" + (
            ": translate with fairseq-generate" if kind == "translation" else "")
    else:
        fix = f"add {task_option(trained)} and the data folder it was trained on"
    raise UserError(f"{checkpoint['path']} holds {have.one} ({arch}, trained with {task_option(trained)}), and the "
                    f"task here is {_task_name(task)}: {fix}")


def check_dictionaries(task, checkpoint):
    """UserError when a checkpoint's token embeddings have other sizes than the task's dictionaries."""
    options = task_options(task)
    data = _get(options, "data")
    folder = data.split(os.pathsep)[0] if isinstance(data, str) else "the data folder"
    if task_kind(task) == "translation":
        sides = [("encoder", task.source_dictionary, "source", f"dict.{_get(options, 'source_lang')}.txt"),
                 ("decoder", task.target_dictionary, "target", f"dict.{_get(options, 'target_lang')}.txt")]
    else:  # a language model's input and a masked LM's come from dict.txt
        sides = [(part, task.source_dictionary, "token", "dict.txt") for part in ("encoder", "decoder")]
    for part, dictionary, side, name in sides:
        rows = checkpoint["rows"].get(part)
        if rows is None or dictionary is None or rows == len(dictionary):
            continue
        trained = checkpoint.get("data")
        raise UserError(f"{checkpoint['path']} was trained with another dictionary: its {side} embeddings have "
                        f"{rows} rows, and {os.path.join(folder, name)} has {len(dictionary)} entries; give the "
                        "data folder it was trained on" + (f" ({trained})" if trained else ""))


def check_positions(model, task, checkpoint):
    """UserError when the task's blocks are longer than the positions the model has (with
    --sample-break-mode eos a sample is one line, whatever its length: fairseq skips the long ones)."""
    options = task_options(task)
    if task_kind(task) not in ("language model", "masked language model") or (
            str(_get(options, "sample_break_mode")) == "eos"):
        return
    block, positions = _get(options, "tokens_per_sample"), model.max_positions()
    if not isinstance(block, int) or not isinstance(positions, int) or block <= positions:
        return
    asked = f"{option('task', 'tokens_per_sample')} {block}"
    if checkpoint is None:
        key = "max_target_positions" if task_kind(task) == "language model" else "max_positions"
        raise UserError(f"{asked} is more than the {positions} positions of the model "
                        f"({option('model', key)} {positions}): give {option('task', 'tokens_per_sample')} "
                        f"{positions} or less, or {option('model', key)} {block} or more")
    raise UserError(f"{asked} is more than the {positions} positions of the model in {checkpoint['path']}: "
                    f"give {option('task', 'tokens_per_sample')} {positions} or less")


def _checking_fit(build_model):
    @functools.wraps(build_model)
    def wrapper(cfg, task, *args, **kwargs):
        from_checkpoint = kwargs.get("from_checkpoint", args[0] if args else False)
        noted = take_checkpoint()
        checkpoint = noted if from_checkpoint and noted else None
        check_kind(cfg, task, checkpoint)
        if checkpoint is not None:
            check_dictionaries(task, checkpoint)
        with building(from_checkpoint):
            model = build_model(cfg, task, *args, **kwargs)
        check_positions(model, task, checkpoint)
        return model

    return wrapper

