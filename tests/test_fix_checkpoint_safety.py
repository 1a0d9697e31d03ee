"""Checkpoints load with torch's weights-only unpickler (the default since torch 2.6), through fairseq's
own loading path, and a checkpoint holding any other pickled object is refused: nothing runs."""

import argparse
import os
import pickle
import re

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq import checkpoint_utils  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the safe globals)
from fairseq_eva.fairseq_fixes import checkpoint_safety  # noqa: E402
from fairseq_eva.fairseq_fixes.checkpoint_safety import SAFE_GLOBALS, CheckpointError  # noqa: E402
from fairseq_helpers import USER_DIR, lm_data, run  # noqa: E402


class Payload:
    """An arbitrary object: unpickling it would need this class, which is not an allowed global."""

    def __init__(self):
        self.value = 42


class RunsCode:
    """Unpickling this runs a shell command (the classic pickle exploit)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def checkpoint(**extra_state):
    """What fairseq-train saves, in small: tensors, containers, and the model's argparse.Namespace."""
    args = argparse.Namespace(arch="transformer_eva_tiny", task="translation", eva_overlap=True)
    return {
        "args": None,
        "cfg": {"model": args, "task": {"_name": "translation"}},
        "model": {"encoder.w": torch.zeros(2)},
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                               "lr_scheduler_state": {"best": 1.0}, "num_updates": 3}],
        "extra_state": {"train_iterator": {"epoch": 1}, **extra_state},
    }


def test_registered_types_are_only_what_fairseq_checkpoints_hold():
    assert SAFE_GLOBALS == (argparse.Namespace,)
    assert argparse.Namespace in torch.serialization.get_safe_globals()


def test_a_plain_checkpoint_loads_through_fairseqs_loader(tmp_path):
    path = tmp_path / "ok.pt"
    torch.save(checkpoint(), path)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert state["cfg"].model.arch == "transformer_eva_tiny" and state["cfg"].model.eva_overlap is True


@pytest.mark.parametrize("make", [lambda marker: Payload(), lambda marker: RunsCode(marker)], ids=["object", "os.system"])
def test_a_checkpoint_with_a_pickled_object_is_refused(tmp_path, make):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save(checkpoint(payload=make(marker)), path)
    with pytest.raises(pickle.UnpicklingError) as error:  # a CheckpointError
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert re.match(f"{path} is not a fairseq checkpoint \\(it holds what a weights-only load refuses: .*GLOBAL "
                    f"({__name__}.{type(make(marker)).__name__}|posix.system)", str(error.value))
    assert "weights_only=False" not in str(error.value) and "`False`" not in str(error.value)
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"not a checkpoint\n", [1, 2], {"a": torch.zeros(1)}], ids=["text", "list", "dict"])
def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path, content):
    path = tmp_path / "notes.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(CheckpointError, match=f"^{path} is not a fairseq checkpoint \\(") as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert "weights_only" not in str(error.value)


@pytest.mark.parametrize("text", ["the 1234\n, 567\n", "a 12\n", "e 3\n", "to 4\n", "r 5\n"])
def test_text_is_named_as_text_whatever_its_first_letter(tmp_path, text):
    """A dictionary or a log given as a checkpoint: text whose first letters are pickle opcodes (append, tuple,
    ...) is refused by its first bytes, not by torch's unpickler (an IndexError)."""
    path = tmp_path / "dict.en.txt"
    path.write_text(text)
    for load in (checkpoint_utils.load_checkpoint_to_cpu, checkpoint_safety.load):
        with pytest.raises(CheckpointError) as error:
            load(str(path))
        assert str(error.value) == f"{path} is not a fairseq checkpoint (it is text, not a file that torch.save wrote)"


def test_bytes_that_torch_save_never_writes_first_are_named(tmp_path):
    path = tmp_path / "random.pt"
    path.write_bytes(bytes([0x99, 0x8B, 0xA2, 0x64, 0xFF]))
    with pytest.raises(CheckpointError, match=r"random\.pt is not a fairseq checkpoint \(it begins with the bytes "):
        checkpoint_safety.load(str(path))


def test_a_checkpoint_in_torchs_legacy_format_still_loads(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save(checkpoint(), path, _use_new_zipfile_serialization=False)
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"]["model"].arch == "transformer_eva_tiny"


@pytest.mark.parametrize("keep", [0, 10, 0.5, -10, -1], ids=["empty", "10 bytes", "half", "all but 10", "all but 1"])
def test_a_truncated_checkpoint_is_called_truncated(tmp_path, keep):
    """A checkpoint cut short (a full disk, a run killed while writing) is not called 'not a checkpoint'."""
    whole = tmp_path / "whole.pt"
    torch.save(checkpoint(), whole)
    data = whole.read_bytes()
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(data[:int(keep * len(data)) if isinstance(keep, float) else keep])
    says = "is empty (0 bytes)" if keep == 0 else "is truncated or corrupt"
    with pytest.raises(CheckpointError, match=f"^{path} {re.escape(says)}"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))


@pytest.mark.slow
def test_fairseq_tools_refuse_it_too(tmp_path, tmp_path_factory):
    data = lm_data(tmp_path_factory)
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save(checkpoint(payload=RunsCode(marker)), path)
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    cut = tmp_path / "checkpoint_last.pt"
    torch.save(checkpoint(), cut)
    cut.write_bytes(cut.read_bytes()[:-10])
    for bad, says in ((path, "is not a fairseq checkpoint (it holds what a weights-only load refuses: "),
                      (text, "is not a fairseq checkpoint ("), (cut, "is truncated or corrupt (")):
        proc = run("fairseq-eval-lm", data["bin"], "--user-dir", USER_DIR, "--cpu", "--path", bad, check=False)
        assert proc.returncode != 0
        assert proc.stderr.splitlines()[-1].startswith(f"fairseq-eval-lm: error: {bad} {says}")
        assert "Traceback" not in proc.log and "weights_only=False" not in proc.log
    assert not marker.exists()


def test_a_checkpoint_whose_bytes_changed_is_refused_before_loading(tmp_path):
    """torch.save stores a CRC-32 of each part; a few bytes changed inside a tensor's data (not a truncation) are
    caught by fairseq's loader with the plugin, and by the load scripts/average_checkpoints.py uses."""
    path = tmp_path / "damaged.pt"
    torch.save({"model": {"w": torch.zeros(100_000)}}, path)
    assert checkpoint_safety.verify(str(path)) is True
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4] = b"\x01\x02\x03\x04"
    path.write_bytes(bytes(data))
    for load in (checkpoint_utils.load_checkpoint_to_cpu, checkpoint_safety.load):
        with pytest.raises(CheckpointError, match=r"damaged\.pt is damaged \(Bad CRC-32.*nothing was loaded"):
            load(str(path))
