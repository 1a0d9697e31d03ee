"""Mistakes with fairseq's command-line tools: those fairseq meets before the plugin is loaded print what
docs/troubleshooting.md says they print; those the plugin meets end with one line."""

import re
from pathlib import Path

import pytest

pytest.importorskip("fairseq")

from fairseq_helpers import REPO, USER_DIR, lm_data, run  # noqa: E402

DOC = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")


def documented(prefix):
    """The message of the troubleshooting row whose message starts with `prefix`."""
    match = re.search(r"^\| `(" + re.escape(prefix) + r"[^`]*)`", DOC, re.M)
    assert match, f"no row for {prefix!r} in docs/troubleshooting.md"
    return match.group(1)


def test_a_mistyped_user_dir_ends_as_documented(tmp_path):
    proc = run("fairseq-train", tmp_path, "--user-dir", "fairseq_evaa", "--task", "language_modeling",
               cwd=tmp_path, check=False)
    assert proc.returncode == 1
    line = documented("FileNotFoundError: ").replace("PATH", str(Path(tmp_path) / "fairseq_evaa"))
    assert proc.stderr.strip().splitlines()[-1] == line


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A tiny EVA language model, two updates: a checkpoint as fairseq-train writes it."""
    data = lm_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("cli_errors_lm")
    run("fairseq-train", data["bin"], "--user-dir", USER_DIR, "--cpu", "--task", "language_modeling",
        "--arch", "transformer_lm_eva_tiny", "--tokens-per-sample", 64, "--optimizer", "adam", "--lr", "1e-3",
        "--criterion", "cross_entropy", "--max-tokens", 512, "--max-update", 2, "--no-epoch-checkpoints",
        "--save-dir", save, cwd=save)
    return {**data, "ckpt": save / "checkpoint_last.pt"}


@pytest.mark.parametrize("user_dir", [None, "other"])
def test_an_eva_checkpoint_without_the_plugin_ends_as_documented(lm, user_dir, tmp_path):
    args = []
    if user_dir:  # a --user-dir that is not the plugin
        (tmp_path / user_dir).mkdir()
        (tmp_path / user_dir / "__init__.py").write_text("")
        args = ["--user-dir", tmp_path / user_dir]
    proc = run("fairseq-eval-lm", lm["bin"], *args, "--cpu", "--path", lm["ckpt"], "--tokens-per-sample", 64,
               "--gen-subset", "test", cwd=tmp_path, check=False)
    assert proc.returncode == 1
    assert documented("WeightsUnpickler error: ") in proc.stderr
    assert "Perplexity" not in proc.log


def test_fairseq_generate_on_a_damaged_checkpoint_is_one_line(lm, tmp_path):
    damaged = tmp_path / "checkpoint_damaged.pt"
    data = bytearray(lm["ckpt"].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])  # every bit flipped
    damaged.write_bytes(bytes(data))
    proc = run("fairseq-generate", lm["bin"], "--user-dir", USER_DIR, "--task", "language_modeling", "--cpu",
               "--path", damaged, "--tokens-per-sample", 64, "--gen-subset", "test", cwd=tmp_path, check=False)
    assert proc.returncode == 1
    assert proc.stdout == ""  # no hypotheses
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fairseq-generate: error: {damaged} is damaged (Bad CRC-32"), last
    assert "Traceback" not in proc.stderr
