"""Precision that needs a CUDA GPU (fp16, bf16), refused in one line where there is none."""

import importlib.util

import torch
from omegaconf import OmegaConf

from ..errors import FP16Error
from ..fairseq_fixes.state import building_from_checkpoint


def device_and_dtype(args):
    """Where and in which precision the model's attention will run (as fairseq's trainer will place it)."""
    cuda = torch.cuda.is_available() and not getattr(args, "cpu", False)
    dtype = torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if cuda and (
        getattr(args, "fp16", False) or getattr(args, "amp", False)) else torch.float32
    return ("cuda" if cuda else "cpu"), dtype


def common_options(args):
    """fairseq's `common` options (cpu, bf16, tpu) beside the model's: fairseq-train's Namespace holds them all;
    under fairseq-hydra-train the model's config is the `model` group of the run's config, which holds `common`."""
    if OmegaConf.is_config(args):
        root = args._get_root()
        return dict(root.get("common") or {}) if root is not args else {}
    return vars(args)


def check_bf16(args):
    """bf16 (fairseq-train's --bf16, fairseq-hydra-train's common.bf16) needs a CUDA GPU as fp16 does: on a CPU
    fairseq trains in bf16 without a word under fairseq-hydra-train, and fairseq-train's --bf16 (fairseq 0.12 turns
    on --tpu with it) ends in "'NoneType' object has no attribute 'xla_device'" where torch_xla is missing, as it
    is here. Stop before the trainer, saying so. A model built from a checkpoint is not checked: the evaluation
    tools do not run in the precision it was trained in."""
    common = common_options(args)
    if not common.get("bf16") or building_from_checkpoint():
        return
    if not torch.cuda.is_available() or common.get("cpu"):
        leave_out = "give common.bf16=false" if OmegaConf.is_config(args) else "leave out --bf16"
        raise FP16Error(f"bf16 needs a CUDA GPU and torch sees none: on a CPU {leave_out}")
    if common.get("tpu") and importlib.util.find_spec("torch_xla") is None:
        raise FP16Error("fairseq-train's --bf16 also turns on --tpu (fairseq 0.12), and torch_xla is not installed: on a "
                        "GPU train with --fp16, or with fairseq-hydra-train and common.bf16=true")


class HalfNeedsCUDA:
    """Model mix-in: fp16 (fairseq's --fp16, common.fp16) needs a CUDA GPU. Without one, fairseq's trainer
    halves the model and then stops deep in its fp16 optimizer with "Torch not compiled with CUDA enabled";
    the trainer and the generators call model.half() first, so the model stops there, saying why."""

    def half(self):
        if not torch.cuda.is_available():
            raise FP16Error("fp16 needs a CUDA GPU and torch sees none: on a CPU leave out --fp16 "
                            "(fairseq-hydra-train: common.fp16=false; the training scripts do so with NGPUS=0)")
        return super().half()
