"""Precision that needs a CUDA GPU (fp16, bf16), refused in one line where there is none."""

import importlib.util

import torch

from ..errors import FP16Error


def device_and_dtype(args):
    """Where and in which precision the model's attention will run (as fairseq's trainer will place it)."""
    cuda = torch.cuda.is_available() and not getattr(args, "cpu", False)
    dtype = torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if cuda and (
        getattr(args, "fp16", False) or getattr(args, "amp", False)) else torch.float32
    return ("cuda" if cuda else "cpu"), dtype


def check_bf16(args):
    """fairseq-train's --bf16 (fairseq 0.12 turns on --tpu with it) ends in "'NoneType' object has no attribute
    'xla_device'" where torch_xla is missing, as it is here; on a CPU, bf16 needs a CUDA GPU as fp16 does. Stop
    before the trainer, saying so. (fairseq-hydra-train's common.bf16 does not reach the model's options.)"""
    if not getattr(args, "bf16", False):
        return
    if not torch.cuda.is_available() or getattr(args, "cpu", False):
        raise FP16Error("bf16 needs a CUDA GPU and torch sees none: on a CPU leave out --bf16")
    if getattr(args, "tpu", False) and importlib.util.find_spec("torch_xla") is None:
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
