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

A model of the same attention but other sizes (another --arch, another --encoder-embed-dim) fails in fairseq's
"Cannot load model parameters": that failure is given back as one line naming the model options in which the
checkpoint and the run differ (`other_model`).

fairseq's evaluation tools (generate, eval-lm, interactive, validate, the hub) build a checkpoint's own model from
its options, record included: a default changed in the code since does not change the model. Their
`--model-overrides` (the hub's keyword arguments) may change what is not recorded (`eva_kernel`, `eva_compile`) and
options outside the attention; one that changes the record would load the checkpoint's parameters into another
attention (fairseq's size mismatch of `feature_map.eval_rows`, or, for a mechanism without parameters, another
model without a word), and is refused naming the difference (`check_overrides`).
"""

import functools
import os
from argparse import Namespace

from ..errors import UserError, option, under_hydra
from ..modules.roles import option_name
from .state import loading_into, trainer_loading


def model_record(model_cfg):
    """The attention record of a model's options (a trainer's, a checkpoint's), filled as the model is built (the
    architecture's defaults, then the mechanisms'); None for a model that is not the plugin's."""
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf

    from ..modules.record import attention_record
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
    from ..modules.record import show_record

    ours, theirs = model_record(model_cfg), model_record(saved_model_cfg(state))
    if ours is None or theirs is None or ours == theirs:
        return
    keys = list(ours) + [k for k in theirs if k not in ours]
    differ = [k for k in keys if ours.get(k) != theirs.get(k)]
    roles = [k for k in differ if k.endswith("_attention")]
    differ = roles or differ  # another mechanism: its options are another model's anyway
    hydra = under_hydra()
    raise UserError(f"{path} holds a model trained with {show_record(theirs, differ, hydra)}, and this run asks for "
                    f"{show_record(ours, differ, hydra)}: {fix_for(path, save_dir)}")


def model_options(model_cfg):
    """{option: value} of a plugin model's options (a trainer's, a checkpoint's) after its architecture's defaults,
    those of the model only; None for a model that is not the plugin's."""
    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf

    from ..modules.hydra_keys import known_model_keys
    from .model_fit import model_class

    cls, arch = model_class(model_cfg) if model_cfg is not None else (None, None)
    if getattr(cls, "ATTENTION_ROLES", None) is None or arch not in ARCH_CONFIG_REGISTRY:
        return None
    values = (OmegaConf.to_container(model_cfg, resolve=True) if OmegaConf.is_config(model_cfg) else
              dict(model_cfg) if isinstance(model_cfg, dict) else dict(vars(model_cfg)))
    args = Namespace(**values)
    ARCH_CONFIG_REGISTRY[arch](args)
    options = {key: getattr(args, key, None) for key in known_model_keys(cls) if key not in ("_name", "arch")}
    return {"arch": arch, **options}


SIZES = ("arch", "_dim", "_layers", "_heads", "_positions", "_cutoff", "share_", "tie_", "learned_pos", "layernorm",
         "no_token_positional", "adaptive")  # the options that set a model's parameters (in their names)


def other_model(path, saved_cfg, model_cfg, save_dir):
    """UserError naming the model options in which the checkpoint at `path` differs from the model it is loaded into
    (those that set sizes, where any do), or None where none differs: for fairseq's "Cannot load model parameters"."""
    ours, theirs = model_options(model_cfg), model_options(saved_cfg)
    if ours is None or theirs is None:
        return None
    differ = [key for key in sorted(ours, key=lambda key: (key != "arch", key)) if ours[key] != theirs.get(key)]
    sizes = [key for key in differ if any(word in key for word in SIZES)]
    differ = ["arch"] if "arch" in differ else sizes or differ  # another architecture: its sizes are another's
    if not differ:
        return None
    hydra = under_hydra()
    shown = {key: "model._name" if hydra else "--arch" for key in ("arch",)}

    def show(values):
        between = "=" if hydra else " "
        return ", ".join(f"{shown.get(k) or option_name(k, hydra)}{between}{values.get(k)}" for k in differ)

    return UserError(f"{path} holds a model trained with {show(theirs)}, and this run asks for {show(ours)}: its "
                     f"parameters do not fit this model; {fix_for(path, save_dir)}")


def fix_for(path, save_dir):
    if os.path.abspath(os.path.dirname(path)) == os.path.abspath(save_dir):
        return (f"give the checkpoint's options to resume it, or another {option('checkpoint', 'save_dir')} to train "
                "this model afresh")
    return "give the checkpoint's options to load it, or another checkpoint"


def check_overrides(path, state, overrides, trained):
    """UserError when `overrides` (--model-overrides, the hub's keyword arguments), now applied to the checkpoint
    `state` read from `path`, change its attention record `trained` (the record before them)."""
    from ..modules.record import show_record

    if trained is None:
        return
    asked = model_record(saved_model_cfg(state))
    if asked is None or asked == trained:
        return
    keys = list(trained) + [k for k in asked if k not in trained]
    differ = [k for k in keys if trained.get(k) != asked.get(k)]
    roles = [k for k in differ if k.endswith("_attention")]
    differ = roles or differ
    given = ", ".join(f"{k!r}: {overrides[k]!r}" for k in overrides if k in keys)
    raise UserError(f"{path} holds a model trained with {show_record(trained, differ)}, and --model-overrides "
                    f"{{{given}}} asks for {show_record(asked, differ)}: its parameters are those of the attention it "
                    "was trained with; leave the attention's options out of --model-overrides (eva_kernel and "
                    "eva_compile may be given)")


def apply_overrides(state, overrides):
    """fairseq's load_checkpoint_to_cpu's own application of arg_overrides (to an old checkpoint's args and to its
    cfg), done here after the record was read."""
    from fairseq.dataclass.utils import overwrite_args_by_name

    if state.get("args") is not None:
        for key, value in overrides.items():
            setattr(state["args"], key, value)
    if state.get("cfg") is not None:
        overwrite_args_by_name(state["cfg"], overrides)


def _noting_trainer(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(self, *args, **kwargs):
        with loading_into(self):
            try:
                return load_checkpoint(self, *args, **kwargs)
            except Exception as error:
                if not str(error).startswith("Cannot load model parameters") or self not in _loaded:
                    raise
                path, saved_cfg = _loaded[self]
                refusal = other_model(path, saved_cfg, self.cfg.model, self.cfg.checkpoint.save_dir)
                if refusal is None:
                    raise
                raise refusal from None
            finally:
                _loaded.pop(self, None)

    return wrapper


_loaded = {}  # trainer: (the checkpoint it is loading, that checkpoint's model options), between the two wrappers


def _comparing(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, arg_overrides=None, *args, **kwargs):
        trainer = trainer_loading()
        if trainer is not None or not arg_overrides:
            state = load_checkpoint_to_cpu(path, arg_overrides, *args, **kwargs)
        else:  # the record before the overrides, then the overrides as fairseq applies them
            state = load_checkpoint_to_cpu(path, None, *args, **kwargs)
            trained = model_record(saved_model_cfg(state))
            apply_overrides(state, arg_overrides)
            check_overrides(path, state, arg_overrides, trained)
        if trainer is not None:
            _loaded[trainer] = (path, saved_model_cfg(state))
            check_same_attention(path, state, trainer.cfg.model, trainer.cfg.checkpoint.save_dir)
        return state

    return wrapper

