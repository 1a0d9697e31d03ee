"""A failed fairseq-train leaves no empty --save-dir behind (fairseq makes it before it builds the task and
the model), and a folder that was there before is left alone."""

import os

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import USER_DIR, run, translation_data  # noqa: E402


@pytest.mark.parametrize("mistake", [
    pytest.param(["--eva-window-size", "5"], id="bad EVA option"),
    pytest.param(["--fp16"], id="fp16 on the CPU", marks=pytest.mark.slow),
    pytest.param(["DATA", "/nonexistent/data-bin"], id="missing data", marks=pytest.mark.slow)])
def test_a_failed_run_leaves_no_empty_save_dir(mistake, tmp_path, tmp_path_factory):
    data = str(translation_data(tmp_path_factory)["bin"])
    if mistake[0] == "DATA":
        data, mistake = mistake[1], []
    save = tmp_path / "checkpoints" / "run"  # neither folder exists yet
    proc = run("fairseq-train", data, "--user-dir", USER_DIR, "--arch", "transformer_eva_tiny", "--cpu",
               "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1024", "--max-update", "1", *mistake,
               "--save-dir", save, check=False)
    assert proc.returncode != 0
    assert not (tmp_path / "checkpoints").exists(), os.listdir(tmp_path / "checkpoints")
    # a folder the user made is theirs: it stays, empty
    save.mkdir(parents=True)
    proc = run("fairseq-train", data, "--user-dir", USER_DIR, "--arch", "transformer_eva_tiny", "--cpu",
               "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1024", "--max-update", "1", *mistake,
               "--save-dir", save, check=False)
    assert proc.returncode != 0 and save.is_dir() and not os.listdir(save)
