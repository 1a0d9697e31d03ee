"""Loading fairseq checkpoints with torch's weights-only unpickler, clear errors for other files, and
atomic checkpoint copies.

torch >= 2.6 loads with `weights_only=True` by default, and fairseq 0.12.x calls `torch.load` without
`weights_only`, so its checkpoints must consist of types that the restricted unpickler accepts.
Besides tensors and plain containers, a fairseq checkpoint of this plugin's models holds only
`argparse.Namespace` (the configuration of legacy, argparse-configured models): that one type is
registered here. Nothing falls back to unrestricted unpickling: a checkpoint holding any other object
is refused.

A file that is not a fairseq checkpoint (or holds such an object) raises `CheckpointError`, which says so
and names the file, instead of torch's message, which suggests loading with `weights_only=False` (that
would run whatever code the file holds); an empty file, or one that begins as torch.save's zip archive but
lacks its end, is called empty or truncated (a full disk, a run killed while writing it). The plugin also
makes fairseq's own loader (`checkpoint_utils.load_checkpoint_to_cpu`, used by fairseq-generate,
fairseq-eval-lm, the hub, ...) raise it.

A checkpoint whose bytes changed after it was written (a disk or copy error) is refused before anything of it is
loaded (`verify`): torch.save's archive stores a CRC-32 of each of its parts (the pickle, each tensor's bytes),
but torch.load never checks them, so a damaged tensor loaded without a word. `verify` reads every part through
Python's zipfile, which checks them: one pass over the file, 0.11 s for a 268 MB checkpoint. Every checkpoint torch.save
wrote in its zip format (torch >= 1.6) carries them, those written before this check included; one in torch's
legacy format, or saved with torch's CRC-32 turned off, loads with a note that it carries none.

fairseq writes the first checkpoint of a save atomically (a temporary file renamed into place) but
copies it to the others (checkpoint_last.pt, checkpoint_best.pt) with a plain file copy: a run killed
during the copy leaves a truncated checkpoint_last.pt, which is what a restarted run loads.
Here fairseq's copy of local files is atomic as well (`atomic_copy`).
"""

import argparse
import functools
import logging
import os
import pickle
import re
import shutil
import zipfile

import torch

from ..errors import UserError

logger = logging.getLogger(__name__)

SAFE_GLOBALS = (argparse.Namespace,)

# What torch.load (and fairseq's upgrade of the state it read) raises for a file that is not a checkpoint:
# text or random bytes (UnpicklingError, KeyError), an empty or truncated file (EOFError, RuntimeError, and
# OSError "Invalid argument" when only the end of the archive is missing), a tensor or a list (RuntimeError,
# TypeError), a dict without fairseq's keys (KeyError).
NOT_A_CHECKPOINT = (pickle.UnpicklingError, EOFError, KeyError, RuntimeError, TypeError, AttributeError, OSError)
ZIP_MAGIC = b"PK\x03\x04"  # how every file torch.save writes (its zip format, torch >= 1.6) begins
# how torch.save's legacy format (a pickle stream) begins: the PROTO opcode and a protocol torch.save can write
PICKLE_MAGIC = tuple(bytes([pickle.PROTO[0], protocol]) for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1))


class CheckpointError(UserError, pickle.UnpicklingError):
    """A file that is not a fairseq checkpoint, or one holding objects that a weights-only load refuses."""


def _first_sentence(text):
    return " ".join(text.split()).split(". ")[0].rstrip(".")


def is_cut_short(path):
    """The file begins as torch.save's zip archive but lacks the archive's end: written only in part."""
    with open(path, "rb") as f:
        begins = f.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    return begins and not zipfile.is_zipfile(path)


def check_magic(path):
    """CheckpointError naming `path` unless it begins as torch.save writes (its zip archive, or its legacy pickle
    stream). Without it, torch's weights-only unpickler reads any other file as pickle opcodes: text beginning with
    `a`, `e`, `t` or `r` (a dictionary, a log) ends in its own IndexError. An empty file is left to the load, which
    calls it empty."""
    with open(path, "rb") as f:
        head = f.read(len(ZIP_MAGIC))
    if not head or head.startswith(ZIP_MAGIC) or head.startswith(PICKLE_MAGIC):
        return
    try:
        with open(path, encoding="utf-8") as f:
            f.read(1 << 16)
        what = "it is text"
    except UnicodeDecodeError:
        what = f"it begins with the bytes {head!r}"
    raise CheckpointError(f"{path} is not a fairseq checkpoint ({what}, not a file that torch.save wrote)")


def verify(path):
    """Check each part of torch.save's archive at `path` against the CRC-32 stored with it; CheckpointError naming
    the file if one differs, or if it is not a file torch.save wrote (`check_magic`). Returns False where the file
    carries no CRC-32 to check: `note_unchecked` says so once it has loaded (an empty file or one that is not a
    checkpoint fails to load, and gets only that error)."""
    check_magic(path)
    if is_cut_short(path):
        return True  # torch.load fails on it, and not_a_checkpoint says it is truncated
    if not zipfile.is_zipfile(path):
        return False
    checked = False
    try:
        with zipfile.ZipFile(path) as archive:
            for part in archive.infolist():
                if part.CRC == 0:  # an empty part, or torch's CRC-32 turned off
                    continue
                with archive.open(part) as data:  # raises BadZipFile at the end of a part that does not match
                    while data.read(1 << 20):
                        pass
                checked = True
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is damaged ({_first_sentence(str(error))}): its bytes changed after it was "
                              "written; nothing was loaded from it. Use another checkpoint") from None
    return checked


def note_unchecked(path):
    """The note for a checkpoint that loaded, and whose bytes verify could not check."""
    reason = "saved with torch's CRC-32 turned off" if zipfile.is_zipfile(path) else "not torch's zip format"
    logger.warning(f"{path} carries no checksum ({reason}): loaded unchecked")


def not_a_checkpoint(path, error):
    """CheckpointError saying why torch.load (or fairseq's reading of what it loaded) failed, without torch's
    advice to load with weights_only=False."""
    text = str(error)
    if os.path.getsize(path) == 0:
        return CheckpointError(f"{path} is empty (0 bytes): a checkpoint cut off before anything was written, "
                               "or no checkpoint at all")
    if is_cut_short(path):
        return CheckpointError(f"{path} is truncated or corrupt (torch.save's archive without its end: "
                               f"{type(error).__name__}: {_first_sentence(text)}); a full disk or a run killed "
                               "while writing it? Use an earlier checkpoint")
    if text.startswith("Weights only load failed"):
        # torch's paragraphs: its advice, then what it refused (after "WeightsUnpickler error:", or alone)
        found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|$)", text, re.S)
        details = [found.group(1)] if found else [
            p for p in re.split(r"\n\s*\n", text)[1:] if p.strip() and not p.strip().startswith("Check the")]
        detail = _first_sentence(details[0]) if details else "unknown"
        reason = (f"it holds what a weights-only load refuses: {detail}; checkpoints are only loaded weights-only, "
                  "and fairseq's hold only tensors, plain containers and argparse.Namespace")
    elif isinstance(error, (pickle.UnpicklingError, EOFError, KeyError)):
        reason = "not a file that torch.save wrote"
    else:
        reason = f"{type(error).__name__}: {_first_sentence(str(error))}"
    return CheckpointError(f"{path} is not a fairseq checkpoint ({reason})")


def load(path):
    """torch.load(path, weights_only=True) of a fairseq checkpoint (a dict with a 'model' state dict);
    CheckpointError naming the file otherwise, or if its bytes changed since it was written. (Also without the
    plugin, as scripts/average_checkpoints.py loads: the types fairseq's checkpoints need are allowed first.)"""
    allow_fairseq_types()
    checked = verify(path) if os.path.isfile(path) else True
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except NOT_A_CHECKPOINT as error:
        if isinstance(error, OSError) and not os.path.isfile(path):
            raise  # a missing file or a folder: the OS's words are right
        raise not_a_checkpoint(path, error) from error
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CheckpointError(f"{path} is not a fairseq checkpoint (no 'model' state dict in it)")
    if not checked:
        note_unchecked(path)
    return state


def _clear_errors(load_checkpoint_to_cpu):
    @functools.wraps(load_checkpoint_to_cpu)
    def wrapper(path, *args, **kwargs):
        checked = verify(path) if os.path.isfile(path) else True
        try:
            state = load_checkpoint_to_cpu(path, *args, **kwargs)
        except CheckpointError:
            raise
        except NOT_A_CHECKPOINT as error:
            if isinstance(error, OSError) and not os.path.isfile(path):
                raise  # a missing file or a folder: the OS's words are right
            raise not_a_checkpoint(path, error) from error
        if not checked:
            note_unchecked(path)
        return state

    return wrapper


def allow_fairseq_types():
    """Allow the types that fairseq checkpoints need (idempotent)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no weights-only default to satisfy
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


def _atomic_copies(fairseq_copy):
    """fairseq's PathManager.copy, which the checkpoint saving uses, becomes `atomic_copy`, which keeps fairseq's
    copy for paths that are not local files."""
    global _fairseq_copy
    _fairseq_copy = fairseq_copy
    return atomic_copy


_fairseq_copy = None  # fairseq's own PathManager.copy, once `_atomic_copies` has replaced it

