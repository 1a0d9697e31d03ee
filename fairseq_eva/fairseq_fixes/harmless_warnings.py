"""Silence the warnings that fairseq 0.12 prints on every run with this torch and hydra, each known to be
harmless, so that a warning that matters is seen. Each filter matches one message (and its category); other
warnings and every error are left as they are.

fairseq-hydra-train prints a few before any plugin is loaded (hydra's `version_base` and "validated against
ConfigStore schema" warnings): no plugin can filter those (docs/design.md, "What the plugin cannot reach").
"""

import warnings

# (category, message pattern: matched from the message's start, and why the warning is harmless)
HARMLESS = (
    # fairseq 0.12 was written for hydra 1.0. requirements.txt pins hydra-core 1.3.2, which still does what
    # these deprecated forms ask: the old names of initialize() and compose(); version 1.1 behaviour when
    # version_base is not given; the `# @package _group_` header of fairseq's config files; the automatic
    # schema matching of fairseq's hydra_init (the schema stored under the config's own name); and
    # compose(strict=False), whose flag hydra ignores (composition works without it).
    (UserWarning, r"hydra\.experimental\.(initialize|compose)\(\) is no longer experimental"),
    (UserWarning, r"\s*The version_base parameter is not specified"),
    (UserWarning, r"In '[^']*': Usage of deprecated keyword in package header '# @package _group_'"),
    (UserWarning, r"\s*'[^']*' is validated against ConfigStore schema with the same name"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    # fairseq's data iterators ask for pinned memory to speed up copies to a GPU; without one torch skips it.
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
    # fairseq's train and valid steps (and its --amp optimizer) use the torch.cuda.amp spelling of
    # torch.amp's autocast and GradScaler: the same objects, deprecated but not removed in this torch.
    (FutureWarning, r"`torch\.cuda\.amp\.(autocast|GradScaler)\(args\.\.\.\)` is deprecated"),
    # fairseq's MultiheadAttention (softmax attention, e.g. the translation decoder) passes a boolean padding
    # mask with a float causal mask; torch turns the boolean mask into the same float mask (-inf where True).
    (UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated"),
)


def install():
    """Ignore each harmless warning (idempotent: warnings.filterwarnings drops a duplicate filter)."""
    for category, message in HARMLESS:
        warnings.filterwarnings("ignore", message=message, category=category)
