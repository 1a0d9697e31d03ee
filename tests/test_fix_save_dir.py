"""A failed fairseq-train leaves no empty --save-dir behind (fairseq makes it before it builds the task and
the model), and a folder that was there before is left alone."""

import os

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, USER_DIR, run, translation_data  # noqa: E402


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


def test_a_hydra_run_that_never_trained_leaves_no_save_dir(tmp_path, tmp_path_factory):
    """The configs make the save dir hydra's run dir: hydra writes .hydra/ and hydra_train.log into it before the
    plugin is loaded. A misspelled key stops the run before training; the folder goes with hydra's files."""
    data = str(translation_data(tmp_path_factory)["bin"])
    save = tmp_path / "checkpoints" / "run"
    proc = run("fairseq-hydra-train", "--config-dir", REPO / "configs", "--config-name", "wmt14_en_de_eva16",
               f"task.data={data}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={save}", "common.cpu=true",
               "common.fp16=false", "+model.eva_windw_size=8", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "model.eva_windw_size is not an option of transformer_eva_wmt_en_de" in proc.log, proc.log[-3000:]
    assert (tmp_path / "checkpoints").is_dir() and not save.exists()  # the parent: hydra does not say it made it


def test_a_hydra_run_dir_that_saw_training_stays(tmp_path):
    """Only hydra's files and a log that never reached "training on": a log of training is kept."""
    from fairseq_eva.fairseq_fixes.save_dir import remove_if_untrained

    names = {".hydra", "hydra_train.log"}
    for log, kept in (("[t][fairseq_cli.train][INFO] - model: TransformerModel\n", False),
                      ("[t][fairseq_cli.train][INFO] - training on 1 devices (GPUs/TPUs)\n", True)):
        save = tmp_path / "run"
        (save / ".hydra").mkdir(parents=True)
        (save / ".hydra" / "config.yaml").write_text("{}")
        (save / "hydra_train.log").write_text(log)
        remove_if_untrained(str(save), names)
        assert save.exists() == kept
    (save / "notes.txt").write_text("mine")  # anything else: the folder is not hydra's alone
    (save / "hydra_train.log").write_text("")
    remove_if_untrained(str(save), names)
    assert (save / "notes.txt").exists()
