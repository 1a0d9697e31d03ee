"""A kernel pinned by --eva-kernel is refused where it cannot run (this machine, this model's bias) when the model
is built, and where it cannot train when training begins: not at the first batch, where a failure would leave a
crash.pt."""

import warnings

import torch

from ..errors import AttentionOptionError, under_hydra
from ..modules.roles import option_name
from .precision import device_and_dtype


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


def check_kernel_runs_here(plans, args, hydra=False):
    """A kernel pinned by --eva-kernel that cannot run on this machine (no CUDA, no C compiler, no Triton) or this
    model's bias (a per-place table) is refused now, not at the first batch. What depends on the call (training,
    dropout) is checked there."""
    from ..attention.eva import EVAAttention

    device, dtype = device_and_dtype(args)
    for plan in plans.values():
        options = dict(plan.options)
        if plan.kind == "softmax" or not issubclass(plan.mechanism.module_class(), EVAAttention) or \
                options["kernel"] == "auto":
            continue
        name = options["kernel"]
        refused = pinned_kernel_refusal(name, torch.empty(0, device=device, dtype=dtype), needs_grad=False, dropout=0.0,
                                        bias_grad=False, bias_grid=options.get("rpe_type") == "table")
        if refused is None:
            continue
        reason, usable = refused
        option = plan.option_name("kernel", hydra)
        raise AttentionOptionError(f"{option} {name} cannot run on this machine ({reason}): use one of {usable} "
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
    """Raise AttentionOptionError when an EVA layer's pinned kernel cannot compute a training call of that layer."""
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
        raise AttentionOptionError(f"{option} {layer.kernel} cannot train this model ({reason}): train with one of "
                                   f"{usable} (it can still evaluate the trained model: --model-overrides "
                                   f"\"{{'eva_kernel': '{layer.kernel}'}}\")")
