"""The start of every plugin model's build_model (`prepare_args`): fill in the architecture's defaults, resolve the
attention options into one plan per self-attention, check them, and write the attention record into the options
that fairseq saves. A mistake stops here, before any batch is loaded."""

from argparse import Namespace

from omegaconf import OmegaConf, open_dict

from ..fairseq_fixes.distributed import check_launch
from ..fairseq_fixes.state import building_from_checkpoint
from ..modules.hydra_keys import check_model_keys
from ..modules.plan import resolve_all
from ..modules.record import plans_record
from ..modules.validation import check_plans, check_unused_options
from .kernel_checks import check_kernel_runs_here
from .precision import check_bf16


def as_namespace(args):
    """fairseq-hydra-train hands legacy (argparse) models a DictConfig: make it a flat Namespace so that
    fairseq's TransformerConfig.from_namespace copies the EVA options along with the others."""
    if OmegaConf.is_config(args):
        return Namespace(**OmegaConf.to_container(args, resolve=True))
    return args


def prepare_args(model_class, args, architecture, task=None):
    """The checks and defaults before a model is built: (the args as a Namespace, {role: AttentionPlan}).

    `architecture` fills what the config leaves unset (old or hand-written configs); `model_class.ATTENTION_ROLES`
    maps each role to its attention option; `task` limits the inputs' length. The model builds its layers inside
    `modules.plan.building(plans)`."""
    roles = model_class.ATTENTION_ROLES
    check_launch()  # torchrun's processes must form one group (fairseq_eva/fairseq_fixes/distributed.py)
    check_bf16(args)
    hydra = OmegaConf.is_config(args)
    if hydra:
        check_model_keys(args, model_class)  # a misspelled model. key would otherwise be ignored
    given = args
    args = as_namespace(args)
    architecture(args)
    plans = resolve_all(args, roles, hydra)
    check_plans(args, plans, hydra, task)
    if not building_from_checkpoint():  # (a checkpoint's options were checked when it was trained)
        check_unused_options(args, plans, roles, architecture_defaults(args, architecture), hydra)
    check_kernel_runs_here(plans, args, hydra)
    record(given, args, plans_record(plans, roles))
    return args, plans


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
