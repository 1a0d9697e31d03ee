"""fairseq-train loads a checkpoint only into a model of the same attention, or stops with one line naming both.

fairseq-train resumes checkpoint_last.pt of its --save-dir (or loads --restore-file, --finetune-from-model) into
the model built from its command line, and checks only that the parameters fit: a run started with
--decoder-attention elu and resumed with --decoder-attention softmax has the same parameters and trains on under
softmax without a word (one row of a comparison silently becomes another); other changes (performer to lara, 256
random features to 64) end in fairseq's 112-line "Cannot load model parameters ... ensure that the architectures
match", which never names the attention. Without this fix: train a tiny language model with --decoder-attention
elu, then run the same command with --decoder-attention softmax.

The plugin's models write their attention record (`options.attention_record`: each role's mechanism and every
option of it, defaults included) into their options when they are built, and fairseq saves those in every
checkpoint. When `Trainer.load_checkpoint` reads a checkpoint, its record is compared with the record of the model
it is loaded into, before any parameter is: a difference stops the run, before any update. A checkpoint from before
the record holds the options that were given, and the others are taken at today's defaults, as it was loaded before.

fairseq's evaluation tools (generate, eval-lm, interactive, validate, the hub) build a checkpoint's own model from
its options, record included: a default changed in the code since does not change the model, and there is no
command line to compare with (`--model-overrides` is the user's explicit change, e.g. of `eva_kernel`).
"""

import functools
import os
from argparse import Namespace

from ..errors import UserError, option, under_hydra
from .state import loading_into, trainer_loading


def model_record(model_cfg):
    """The attention record of a model's options (a trainer's, a checkpoint's), filled as the model is built (the
    architecture's defaults, then the mechanisms'); None for a model that is not the plugin's."""
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf

    from ..modules.options import attention_record
    from .model_fit import model_class

    if model_cfg is None:
        return None
    cls, arch = model_class(model_cfg)
    roles = getattr(cls, "ATTENTION_ROLES", None)
    if roles is None or arch not in ARCH_CONFIG_REGISTRY:
        return None
    if OmegaConf.is_config(model_cfg):
        values = OmegaConf.to_container(model_cfg, resolve=True)
    else:
        values = dict(model_cfg) if isinstance(model_cfg, dict) else dict(vars(model_cfg))
    args = Namespace(**values)
    ARCH_CONFIG_REGISTRY[arch](args)
    try:
        return attention_record(args, roles)
    except ValueError:  # options that do not build: fairseq's own checks say what is wrong
        return None


def saved_model_cfg(state):
    """The model options a checkpoint was trained with: its cfg's, or an old checkpoint's args."""
    cfg = state.get("cfg")
    if cfg is not None:
        return cfg.get("model") if hasattr(cfg, "get") else getattr(cfg, "model", None)
    return state.get("args")


def check_same_attention(path, state, model_cfg, save_dir):
    """UserError when the checkpoint `state` (read from `path`) holds another attention than the model of
    `model_cfg` it is about to be loaded into."""
    from ..modules.options import show_record

    ours, theirs = model_record(model_cfg), model_record(saved_model_cfg(state))
    if ours is None or theirs is None or ours == theirs:
        return
    keys = list(ours) + [k for k in theirs if k not in ours]
    differ = [k for k in keys if ours.get(k) != theirs.get(k)]
    roles = [k for k in differ if k.endswith("_attention")]
    differ = roles or differ  # another mechanism: its options are another model's anyway
    hydra = under_hydra()
    if os.path.abspath(os.path.dirname(path)) == os.path.abspath(save_dir):
        fix = (f"give the checkpoint's options to resume it, or another {option('checkpoint', 'save_dir')} to train "
               "this model afresh")
    else:
        fix = "give the checkpoint's options to load it, or another checkpoint"
    raise UserError(f"{path} holds a model trained with {show_record(theirs, differ, hydra)}, and this run asks for "
                    f"{show_record(ours, differ, hydra)}: {fix}")


def _noting_trainer(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(self, *args, **kwargs):
        with loading_into(self):
            return load_checkpoint(self, *args, **kwargs)

    return wrapper


def _comparing(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        loaded = load_checkpoint_to_cpu(path, *args, **kwargs)
        trainer = trainer_loading()
        if trainer is not None:
            check_same_attention(path, loaded, trainer.cfg.model, trainer.cfg.checkpoint.save_dir)
        return loaded

    return wrapper

