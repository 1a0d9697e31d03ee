"""Helpers shared by the model files."""

from argparse import Namespace

import torch
from omegaconf import OmegaConf

from ..errors import FP16Error


def as_namespace(args):
    """fairseq-hydra-train hands legacy (argparse) models a DictConfig: make it a flat Namespace so that
    fairseq's TransformerConfig.from_namespace copies the EVA options along with the others."""
    if OmegaConf.is_config(args):
        return Namespace(**OmegaConf.to_container(args, resolve=True))
    return args


class HalfNeedsCUDA:
    """Model mix-in: fp16 (fairseq's --fp16, common.fp16) needs a CUDA GPU. Without one, fairseq's trainer
    halves the model and then stops deep in its fp16 optimizer with "Torch not compiled with CUDA enabled";
    the trainer and the generators call model.half() first, so the model stops there, saying why."""

    def half(self):
        if not torch.cuda.is_available():
            raise FP16Error("fp16 needs a CUDA GPU and torch sees none: on a CPU leave out --fp16 "
                            "(fairseq-hydra-train: common.fp16=false; the training scripts do so with NGPUS=0)")
        return super().half()
