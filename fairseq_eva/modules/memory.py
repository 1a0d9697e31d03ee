"""Memory that a count option can ask for beyond the machine's, refused in one line before it is allocated: a
mechanism's parameters (checked when the model is built) and what one layer holds for a batch (its declaration's
Memory, checked as each batch reaches the layer)."""

import os

from ..errors import AttentionOptionError, under_hydra


def machine_memory():
    """Bytes of memory of the device the model will train on: the GPU's, or this machine's."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gigabytes(count):
    return f"{count / 2**30:,.1f} GiB"


def check_parameters(plan, module, layers, hydra):
    """AttentionOptionError when `layers` layers of the plan's module (built on the meta device) hold more
    parameters than the machine's memory."""
    needed = 4 * layers * sum(t.numel() for t in (*module.parameters(), *module.buffers()))  # float32
    if needed > machine_memory():
        defaults = plan.mechanism.defaults()
        given = ", ".join(f"{plan.option_name(o, hydra)} {v}" for o, v in plan.options if defaults[o] != v)
        raise AttentionOptionError(f"{plan.kind} attention with {given or 'its defaults'} needs {gigabytes(needed)} for "
                                   f"the parameters of its {layers} layers alone, more than this machine's "
                                   f"{gigabytes(machine_memory())}")


def check_batch(plan, x, num_heads):
    """AttentionOptionError when one layer of the plan would hold more than the machine's memory for the batch x
    (B x N x embed_dim), with the estimate and the option to lower: raised before the layer allocates it."""
    import torch

    mechanism = plan.mechanism
    if mechanism.memory is None:
        return
    B, N, D = x.shape
    options = dict(plan.options)
    needed = mechanism.held_bytes(B, N, num_heads, D // num_heads, x.element_size(), torch.is_grad_enabled(), **options)
    memory = machine_memory()
    if needed > memory:
        defaults = mechanism.defaults()
        grown = mechanism.memory.options
        option = next((o for o in grown if options[o] != defaults[o]), grown[0])
        name = plan.option_name(option, under_hydra())
        raise AttentionOptionError(f"{name} {options[option]} needs at least {gigabytes(needed)} for one {plan.kind} "
                                   f"layer on a batch of {B} x {N} tokens, more than this machine's {gigabytes(memory)}: "
                                   f"give a smaller {name} (or fewer tokens a batch)")
