"""What the three models share: the start of build_model (`prepare_args`) and fp16's CUDA check."""

import importlib.util
import warnings
from argparse import Namespace

import torch
from omegaconf import OmegaConf, open_dict

from ..errors import FP16Error, under_hydra
from ..fairseq_fixes.distributed import check_launch
from ..fairseq_fixes.state import building_from_checkpoint
from ..modules.options import (
    EVA_LAYER,
    EVAOptionError,
    attention_kind,
    attention_record,
    check_model_keys,
    check_unused_options,
    option_name,
    validate_eva_args,
)


def as_namespace(args):
    """fairseq-hydra-train hands legacy (argparse) models a DictConfig: make it a flat Namespace so that
    fairseq's TransformerConfig.from_namespace copies the EVA options along with the others."""
    if OmegaConf.is_config(args):
        return Namespace(**OmegaConf.to_container(args, resolve=True))
    return args


def prepare_args(model_class, args, architecture, task=None):
    """The checks and defaults before a model is built; returns the args as a Namespace.

    `architecture` fills what the config leaves unset (old or hand-written configs); `model_class.ATTENTION_ROLES`
    maps each role to its attention option (see validate_eva_args); `task` limits the inputs' length. A mistake
    stops here, before any batch is loaded."""
    roles = model_class.ATTENTION_ROLES
    check_launch()  # torchrun's processes must form one group (fairseq_eva/fairseq_fixes/distributed.py)
    check_bf16(args)
    hydra = OmegaConf.is_config(args)
    if hydra:
        check_model_keys(args, model_class)  # a misspelled model. key would otherwise be ignored
    given = args
    args = as_namespace(args)
    architecture(args)
    validate_eva_args(args, roles, hydra, task)
    if not building_from_checkpoint():  # (a checkpoint's options were checked when it was trained)
        check_unused_options(args, roles, architecture_defaults(args, architecture), hydra)
    if any(attention_kind(args, attention, hydra) in EVA_LAYER for attention in roles.values()):
        check_kernel_runs_here(args, hydra)
    record(given, args, attention_record(args, roles, hydra))
    return args


def architecture_defaults(args, architecture):
    """The options that the model's architecture (--arch, model._name) sets when none is given."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    defaults = Namespace()
    ARCH_CONFIG_REGISTRY.get(getattr(args, "arch", None) or getattr(args, "_name", None), architecture)(defaults)
    return defaults


def record(given, args, values):
    """Write the attention record into the model's options, which fairseq saves in its checkpoints: into the Namespace
    (fairseq-train's, and a checkpoint's) and, under fairseq-hydra-train, into the config the trainer saves too."""
    for key, value in values.items():
        setattr(args, key, value)
    if OmegaConf.is_config(given):
        with open_dict(given):
            for key, value in values.items():
                given[key] = value


def _device_and_dtype(args):
    """Where and in which precision the model's attention will run (as fairseq's trainer will place it)."""
    cuda = torch.cuda.is_available() and not getattr(args, "cpu", False)
    dtype = torch.bfloat16 if getattr(args, "bf16", False) else torch.float16 if cuda and (
        getattr(args, "fp16", False) or getattr(args, "amp", False)) else torch.float32
    return ("cuda" if cuda else "cpu"), dtype


def pinned_kernel_refusal(name, q, **call):
    """(why the pinned kernel `name` cannot compute this call, the kernels that can: "auto, ..."), or None when it
    can; `call` as KernelSpec.refusal takes it."""
    from ..attention.kernels import KERNELS

    def refusal(kernel):
        with warnings.catch_warnings():  # the C loop's warning that auto runs another kernel: not the case here
            warnings.simplefilter("ignore")
            return KERNELS[kernel].refusal(q, **call)

    reason = refusal(name)
    if reason is None:
        return None
    return reason, ", ".join(["auto"] + [k for k in KERNELS if k != name and refusal(k) is None])


def check_kernel_runs_here(args, hydra=False):
    """A kernel pinned by --eva-kernel that cannot run on this machine (no CUDA, no C compiler, no Triton) or this
    model's bias (a per-place table) is refused now, not at the first batch. What depends on the call (training,
    dropout) is checked there."""
    name = getattr(args, "eva_kernel", "auto") or "auto"
    if name == "auto":
        return
    device, dtype = _device_and_dtype(args)
    bias_grid = getattr(args, "eva_rpe_type", "buckets") == "table"  # (validate_eva_args: then every EVA layer has it)
    refused = pinned_kernel_refusal(name, torch.empty(0, device=device, dtype=dtype), needs_grad=False, dropout=0.0,
                                    bias_grad=False, bias_grid=bias_grid)
    if refused is None:
        return
    reason, usable = refused
    option = option_name("eva_kernel", hydra)
    raise EVAOptionError(f"{option} {name} cannot run on this machine ({reason}): use one of {usable} "
                         f"(a model trained with it: --model-overrides \"{{'eva_kernel': 'auto'}}\")")


class PinnedKernelTrains:
    """Model mix-in: a kernel pinned by --eva-kernel that can evaluate the model but not train it (torch's fused
    CPU kernel gives no gradient to the trainable relative position bias and takes no dropout) is refused when
    training begins, before the first batch: fairseq's trainer calls model.train() ahead of its step, where a
    failure would leave a crash.pt. Evaluating with it (fairseq-generate, eval-lm) stays allowed."""

    def train(self, mode=True):
        if mode and not getattr(self, "_pinned_kernels_checked", False):
            check_kernel_trains(self)
            self._pinned_kernels_checked = True
        return super().train(mode)


def check_kernel_trains(model):
    """Raise EVAOptionError when an EVA layer's pinned kernel cannot compute a training call of that layer."""
    from ..attention.eva import EVAAttention
    from ..attention.relative_position import PlaceBias

    for layer in model.modules():
        if not isinstance(layer, EVAAttention) or layer.kernel == "auto":
            continue
        weight = layer.q_proj.weight
        refused = pinned_kernel_refusal(
            layer.kernel, torch.empty(0, device=weight.device, dtype=weight.dtype), needs_grad=True,
            dropout=layer.dropout.p, bias_grad=layer.rpe is not None and any(p.requires_grad for p in layer.rpe.parameters()),
            bias_grid=isinstance(layer.rpe, PlaceBias))
        if refused is None:
            continue
        reason, usable = refused
        option = option_name("eva_kernel", under_hydra())
        raise EVAOptionError(f"{option} {layer.kernel} cannot train this model ({reason}): train with one of {usable} "
                             f"(it can still evaluate the trained model: --model-overrides \"{{'eva_kernel': "
                             f"'{layer.kernel}'}}\")")


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
