"""scripts/average_checkpoints.py against a hand computation, and its refusals and atomic write."""

import argparse
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import average_checkpoints as avg  # noqa: E402


def save(path, model, **extra):
    torch.save({"model": model, **extra}, path)
    return str(path)


def three(tmp_path):
    """Three checkpoints whose average is known by hand."""
    return [
        save(tmp_path / "checkpoint1.pt", {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([65504.0], dtype=torch.float16),
                                           "steps": torch.tensor([7])}, epoch=1),
        save(tmp_path / "checkpoint2.pt", {"w": torch.tensor([2.0, 0.0]), "h": torch.tensor([65504.0], dtype=torch.float16),
                                           "steps": torch.tensor([8])}, epoch=2),
        save(tmp_path / "checkpoint3.pt", {"w": torch.tensor([4.0, 1.0]), "h": torch.tensor([65504.0], dtype=torch.float16),
                                           "steps": torch.tensor([9])}, epoch=3),
    ]


def test_matches_hand_computation(tmp_path):
    paths = three(tmp_path)
    out = tmp_path / "avg.pt"
    assert avg.main(["--inputs", *paths, "--output", str(out)]) == 0
    state = torch.load(out, weights_only=True)
    # (1 + 2 + 4) / 3 and (2 + 0 + 1) / 3
    assert torch.equal(state["model"]["w"], torch.tensor([7 / 3, 1.0], dtype=torch.float32))
    assert state["model"]["w"].dtype == torch.float32
    # float16 at its maximum: a float16 sum would overflow to inf; float64 gives the value back
    assert state["model"]["h"].dtype == torch.float16
    assert state["model"]["h"].item() == 65504.0
    # integer buffers and the rest of the file come from the first checkpoint
    assert state["model"]["steps"].item() == 7 and state["epoch"] == 1


def test_float64_accumulation(tmp_path):
    # in float32, 2**24 + 1 rounds back to 2**24, so a float32 sum loses the three ones
    vals = [2.0**24, 1.0, 1.0, 1.0]
    paths = [save(tmp_path / f"c{i}.pt", {"w": torch.tensor([v])}) for i, v in enumerate(vals)]
    state = avg.average_checkpoints(paths)
    assert state["model"]["w"].item() == 4194305.0  # (2**24 + 3) / 4 = 4194304.75, stored as float32
    naive = sum(torch.tensor([v]) for v in vals) / 4
    assert naive.item() == 4194304.0  # what float32 accumulation would have given


def test_last_n_epoch_and_update_checkpoints(tmp_path):
    for e in (1, 2, 3, 10, 11):
        save(tmp_path / f"checkpoint{e}.pt", {"w": torch.tensor([float(e)])})
    for u in (500, 1000, 1500):
        save(tmp_path / f"checkpoint_1_{u}.pt", {"w": torch.tensor([float(u)])})
    save(tmp_path / "checkpoint_last.pt", {"w": torch.tensor([-1.0])})
    save(tmp_path / "checkpoint_best.pt", {"w": torch.tensor([-1.0])})
    names = lambda ps: [os.path.basename(p) for p in ps]  # noqa: E731
    # numeric, not lexicographic, order: 11 and 10 are the newest
    assert names(avg.last_n_checkpoints(str(tmp_path), 3, False)) == ["checkpoint11.pt", "checkpoint10.pt", "checkpoint3.pt"]
    assert names(avg.last_n_checkpoints(str(tmp_path), 2, False, upper_bound=3)) == ["checkpoint3.pt", "checkpoint2.pt"]
    assert names(avg.last_n_checkpoints(str(tmp_path), 2, True)) == ["checkpoint_1_1500.pt", "checkpoint_1_1000.pt"]
    out = tmp_path / "avg.pt"
    assert avg.main(["--inputs", str(tmp_path), "--num-epoch-checkpoints", "2", "--output", str(out)]) == 0
    assert torch.load(out, weights_only=True)["model"]["w"].item() == 10.5
    with pytest.raises(avg.AverageError) as error:
        avg.last_n_checkpoints(str(tmp_path), 6, False)
    assert str(error.value) == (f"{tmp_path} holds 5 epoch checkpoints (checkpoint<N>.pt), fewer than "
                                "--num-epoch-checkpoints 6: pass --num-epoch-checkpoints 5 to average those, "
                                "or pass the checkpoint files themselves as --inputs")
    with pytest.raises(avg.AverageError) as error:
        avg.last_n_checkpoints(str(tmp_path), 2, True, upper_bound=100)
    assert str(error.value) == (f"{tmp_path} holds 0 update checkpoints (checkpoint_<E>_<U>.pt) up to update 100, "
                                "fewer than --num-update-checkpoints 2: pass the checkpoint files themselves "
                                "as --inputs")


@pytest.mark.parametrize(
    "other, message",
    [
        ({"w": torch.zeros(2), "extra": torch.zeros(1)}, "differ in their parameters"),
        ({"v": torch.zeros(2)}, "differ in their parameters"),
        ({"w": torch.zeros(3)}, r"w: \(3,\)"),
        ({"w": torch.zeros(2, dtype=torch.float64)}, "torch.float64"),
    ],
)
def test_refuses_mismatched_checkpoints(tmp_path, capsys, other, message):
    a = save(tmp_path / "a.pt", {"w": torch.ones(2)})
    b = save(tmp_path / "b.pt", other)
    out = tmp_path / "avg.pt"
    with pytest.raises(avg.AverageError, match=message):
        avg.average_checkpoints([a, b])
    assert avg.main(["--inputs", a, b, "--output", str(out)]) == 1
    assert "error:" in capsys.readouterr().err
    assert not out.exists()


def eva_checkpoint(path, window, chunks, old_style=False):
    """A fairseq checkpoint of transformer_eva_tiny with the given EVA options: the shapes do not depend on them."""
    args = argparse.Namespace(arch="transformer_eva_tiny", _name="transformer_eva_tiny", encoder_attention="eva",
                              decoder_attention="softmax", eva_window_size=window, eva_num_chunks=chunks,
                              eva_overlap=True, dropout=0.1)
    config = {"args": args} if old_style else {"cfg": {"model": args}}
    return save(path, {"w": torch.ones(2)}, **config)


@pytest.mark.parametrize("old_style", [False, True], ids=["cfg", "args"])
def test_refuses_checkpoints_of_different_models(tmp_path, capsys, old_style):
    a = eva_checkpoint(tmp_path / "a.pt", 8, 2, old_style)
    b = eva_checkpoint(tmp_path / "b.pt", 4, 4, old_style)
    out = tmp_path / "avg.pt"
    assert avg.main(["--inputs", a, b, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"error: {b} and {a} are different models: eva_num_chunks 4 vs 2, eva_window_size 4 vs 8" in err
    assert not out.exists()
    same = eva_checkpoint(tmp_path / "c.pt", 8, 2, old_style)
    assert avg.main(["--inputs", a, same, "--output", str(out)]) == 0 and out.exists()


def test_refuses_other_architecture(tmp_path):
    a = eva_checkpoint(tmp_path / "a.pt", 8, 2)
    state = torch.load(a, weights_only=True)
    state["cfg"]["model"].arch = "transformer_eva"
    torch.save(state, tmp_path / "b.pt")
    with pytest.raises(avg.AverageError, match="different models: architecture transformer_eva vs transformer_eva_tiny$"):
        avg.average_checkpoints([a, str(tmp_path / "b.pt")])


@pytest.mark.parametrize("content, says", [(b"hello\n", "is not a fairseq checkpoint ("), (b"", "is empty (0 bytes)"),
                                           (torch.zeros(3), "is not a fairseq checkpoint ("),
                                           (b"the 1234\n, 567\n", "is not a fairseq checkpoint (it is text")],
                         ids=["text", "empty", "a tensor", "a dictionary"])
def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path, capsys, content, says):
    a = eva_checkpoint(tmp_path / "a.pt", 8, 2)
    other = tmp_path / "notes.pt"
    if isinstance(content, bytes):
        other.write_bytes(content)
    else:
        torch.save(content, other)
    assert avg.main(["--inputs", a, str(other), "--output", str(tmp_path / "o.pt")]) == 1
    err = capsys.readouterr().err
    assert f"error: {other} {says}" in err
    assert "weights_only=False" not in err and "`weights_only` set to `False`" not in err


def test_missing_checkpoint(tmp_path, capsys):
    a = save(tmp_path / "a.pt", {"w": torch.ones(2)})
    assert avg.main(["--inputs", a, str(tmp_path / "nope.pt"), "--output", str(tmp_path / "o.pt")]) == 1
    assert "no checkpoint" in capsys.readouterr().err


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    paths = three(tmp_path)
    out = tmp_path / "avg.pt"
    out.write_bytes(b"the previous average")
    real_save = torch.save

    def broken_save(obj, f, *a, **k):
        f.write(b"half a checkpoint")  # some bytes reach the disk, then the write fails
        raise OSError("disk full")

    monkeypatch.setattr(avg.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        avg.main(["--inputs", *paths, "--output", str(out)])
    assert out.read_bytes() == b"the previous average"
    fresh = tmp_path / "fresh.pt"
    with pytest.raises(OSError):
        avg.main(["--inputs", *paths, "--output", str(fresh)])
    assert not fresh.exists()
    assert sorted(os.listdir(tmp_path)) == ["avg.pt", "checkpoint1.pt", "checkpoint2.pt", "checkpoint3.pt"]
    monkeypatch.setattr(avg.torch, "save", real_save)
    assert avg.main(["--inputs", *paths, "--output", str(out)]) == 0
    assert torch.load(out, weights_only=True)["model"]["w"][1].item() == 1.0


@pytest.mark.slow
def test_cli_help_and_error_exit():
    script = os.path.join(ROOT, "scripts", "average_checkpoints.py")
    r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--num-epoch-checkpoints" in r.stdout
    # the examples read as shell commands: a long one continues with a backslash, not with a run of spaces
    examples = re.sub(r" \\\n\s*", " ", r.stdout).splitlines()
    examples = [line.strip() for line in examples if line.strip().startswith("python scripts/average_checkpoints.py")]
    assert len(examples) == 3 and all("  " not in line for line in examples), examples
    r = subprocess.run([sys.executable, script, "--inputs", "/nonexistent.pt", "--output", "/tmp/x.pt"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no checkpoint /nonexistent.pt" in r.stderr
