"""Loading fairseq checkpoints with torch's weights-only unpickler.

torch >= 2.6 loads with `weights_only=True` by default, and fairseq 0.12.x calls `torch.load` without
`weights_only`, so its checkpoints must consist of types that the restricted unpickler accepts.
Besides tensors and plain containers, a fairseq checkpoint of this plugin's models holds only
`argparse.Namespace` (the configuration of legacy, argparse-configured models): that one type is
registered here. Nothing falls back to unrestricted unpickling: a checkpoint holding any other object
is refused with `pickle.UnpicklingError`.
"""

import argparse

import torch

SAFE_GLOBALS = (argparse.Namespace,)


def register():
    """Allow the types that fairseq checkpoints need (idempotent)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is None:  # torch < 2.4 has no weights-only default to satisfy
        return
    known = set(torch.serialization.get_safe_globals()) if hasattr(torch.serialization, "get_safe_globals") else set()
    missing = [t for t in SAFE_GLOBALS if t not in known]
    if missing:
        add(missing)


register()
