"""Loading fairseq checkpoints with torch's weights-only unpickler, and writing them atomically.

torch >= 2.6 loads with `weights_only=True` by default, and fairseq 0.12.x calls `torch.load` without
`weights_only`, so its checkpoints must consist of types that the restricted unpickler accepts.
Besides tensors and plain containers, a fairseq checkpoint of this plugin's models holds only
`argparse.Namespace` (the configuration of legacy, argparse-configured models): that one type is
registered here. Nothing falls back to unrestricted unpickling: a checkpoint holding any other object
is refused with `pickle.UnpicklingError`.

fairseq writes the first checkpoint of a save atomically (a temporary file renamed into place) but
copies it to the others (checkpoint_last.pt, checkpoint_best.pt) with a plain file copy: a run killed
during the copy leaves a truncated checkpoint_last.pt, which is what a restarted run loads. Importing
the plugin makes fairseq's copy of local files atomic as well (`atomic_copy`).
"""

import argparse
import os
import shutil

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


def atomic_copy(src_path, dst_path, overwrite=False):
    """fairseq's `PathManager.copy` for local files, through a temporary file renamed into place: the
    destination is either its old self or a complete copy. (Other paths go to fairseq's own copy.)"""
    from fairseq.file_io import PathManager

    if PathManager.path_requires_pathmanager(src_path) or PathManager.path_requires_pathmanager(dst_path):
        return _fairseq_copy(src_path, dst_path, overwrite)
    if os.path.exists(dst_path) and not overwrite:
        return False
    tmp = f"{dst_path}.tmp"
    shutil.copyfile(src_path, tmp)
    os.replace(tmp, dst_path)
    return True


def make_copies_atomic():
    """Route fairseq's PathManager.copy, which the checkpoint saving uses, through `atomic_copy` (idempotent)."""
    global _fairseq_copy
    from fairseq.file_io import PathManager

    if PathManager.copy is not atomic_copy:
        _fairseq_copy = PathManager.copy
        PathManager.copy = staticmethod(atomic_copy)


_fairseq_copy = None
register()
