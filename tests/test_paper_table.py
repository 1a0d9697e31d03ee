"""scripts/paper_table.py, the paper's tables in one command each: the full-size commands against the configs
(through the training scripts' own dry run), the orderings against the seeds' spread, argument errors, and the
translation table at sample scale end to end on a tiny subset of the sample."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from fairseq_helpers import REPO, cli_env, script_module, translation_data

SCRIPT = str(REPO / "scripts" / "paper_table.py")
pt = script_module("paper_table")


def script(*args, env=None, timeout=120):
    """The script's run (text output); `env`: variables on top of the tests' environment."""
    env = {**cli_env(), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], **(env or {})}
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("table", ["mt", "lm", "mlm"])
def test_full_scale_commands_train_each_rows_config(table, tmp_path):
    """Every row of the table, at full size, runs its training script on its own config with its seed, into its
    own folder, then the paper's evaluation; the training script's dry run shows the config it trains."""
    r = script("--table", table, "--scale", "full", "--data", tmp_path / "data", "--work", tmp_path / "w",
               "--seeds", "1,2", "--dry-run")
    assert r.returncode == 0, r.stderr
    commands = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 2 * 2 * len(pt.PAPER[table])  # train and evaluate, each row, each seed
    evaluation = {"mt": "eval_wmt14.sh", "lm": "eval_lm.sh", "mlm": "eval_mlm.sh"}[table]
    for i, row in enumerate(pt.PAPER[table]):
        config = REPO / "configs" / (pt.CONFIG[table].format(row) + ".yaml")
        assert config.exists(), config
        for j, seed in enumerate((1, 2)):
            k = 2 * (j * len(pt.PAPER[table]) + i)  # seed by seed, then row by row
            train, evaluate = commands[k], commands[k + 1]
            save = tmp_path / "w" / f"{row}-seed{seed}"
            assert f"SAVE_DIR={save}" in train and f" {row} common.seed={seed}" in train, train
            assert evaluation in evaluate and str(save) in evaluate, evaluate
            words = shlex.split(train)
            env = dict(w.split("=", 1) for w in words[:2])
            shown = subprocess.run(words[2:], cwd=REPO, capture_output=True, text=True, timeout=60,
                                   env={**cli_env(), **env, "DRY_RUN": "1", "NGPUS": "8",
                                        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]})
            assert shown.returncode == 0, shown.stderr
            assert f"--config-name {config.stem} " in shown.stdout and f"checkpoint.save_dir={save}" in shown.stdout
            assert "common.seed=" + str(seed) in shown.stdout and "distributed_world_size=8" in shown.stdout
            if table != "mt" or j:
                break  # the other tables' rows: one seed through the script is enough


def test_orderings_separate_rows_only_beyond_the_seeds_spread():
    runs = {"a": [{"result": {"bleu": b}} for b in (7.0, 7.2, 7.1)],
            "b": [{"result": {"bleu": b}} for b in (6.0, 6.5, 6.9)],
            "c": [{"result": {"bleu": b}} for b in (5.0, 6.6, 6.2)]}
    text = "\n".join(pt.orderings("mt", runs))
    assert "a 7.10, b 6.47, c 5.93" in text
    assert "a > b, a > c." in text and "b ~ c." in text
    lower = {"x": [{"result": {"ppl": p}} for p in (3.0, 3.1)], "y": [{"result": {"ppl": p}} for p in (3.2, 3.3)]}
    assert "x > y" in "\n".join(pt.orderings("mlm", lower))  # perplexity: lower is better


def test_a_row_of_one_seed_is_ordered_against_no_row():
    """One seed has no spread: however far apart the two scores, the rule claims no ordering."""
    runs = {"a": [{"result": {"bleu": 9.0}}], "b": [{"result": {"bleu": 1.0}}],
            "c": [{"result": {"bleu": b}} for b in (5.0, 5.1)], "d": [{"result": {"bleu": b}} for b in (2.0, 2.1)]}
    by_mean, apart, close, alone = pt.orderings("mt", runs)
    assert apart.endswith(": c > d.") and close.endswith(": none.")
    assert alone == "Not ordered (a row of one seed has no spread): a ? c, a ? d, a ? b, c ? b, d ? b."


def test_a_record_is_refused_from_a_checkout_with_changes(tmp_path, monkeypatch, capsys):
    """A record names the commit that ran: with changes to tracked files it would name another, so --record
    refuses them (untracked files, the records and runs among them, do not count)."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "tracked").write_text("a\n")
    git("add", "tracked")
    git("commit", "-qm", "one")
    (tmp_path / "untracked").write_text("")
    monkeypatch.setattr(pt, "REPO", str(tmp_path))
    args = ["--table", "mt", "--work", str(tmp_path / "w"), "--report", "--record", str(tmp_path / "r")]
    assert not pt.uncommitted() and pt.parse_args(args).record
    (tmp_path / "tracked").write_text("b\n")
    with pytest.raises(SystemExit) as stop:
        pt.parse_args(args)
    assert stop.value.code == 2 and "scripts/at_commit.sh" in capsys.readouterr().err
    assert pt.parse_args(args[:-2]).record is None


@pytest.mark.parametrize("args, message", [
    (["--table", "mt", "--rows", "eva16,eva128"], "--rows: no mt row eva128; its rows: softmax, eva16"),
    (["--table", "mt", "--scale", "full"], "--scale full needs --data"),
    (["--table", "mt", "--scale", "full", "--data", "d", "--rows", "exact"], "no mt row exact"),  # sample scale only
    (["--table", "lm", "--rows", "eva_32l"], "--rows: eva_32l has no small counterpart at sample scale"),
    (["--table", "mt", "--", "--budget-minutes", "3"], "arguments after -- go to scripts/long_context.py"),
    (["--table", "mt", "--seeds", "1,x"], "--seeds '1,x': give whole numbers"),
])
def test_bad_arguments_are_refused_by_name(args, message, tmp_path):
    r = script("--work", tmp_path / "w", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "w").exists()


def test_language_model_tables_at_sample_scale_are_long_contexts_rows(tmp_path):
    r = script("--table", "mlm", "--work", tmp_path / "w", "--rows", "eva_2048,lara_2048", "--seeds", "1",
               "--dry-run", "--", "--budget-minutes", "4")
    assert r.returncode == 0, r.stderr
    assert re.search(r"long_context\.py \S+doc_en --work \S+ --task mlm --rows eva,lara --seeds 1 --parallel 2 "
                     r"--budget-minutes 4$", r.stdout.strip()), r.stdout


def test_translation_table_at_sample_scale_end_to_end(tmp_path_factory, tmp_path):
    """Two rows, one epoch each on a tiny subset: trained, averaged, translated and scored; the table, the
    orderings and the figure written; the same command again trains nothing."""
    data = translation_data(tmp_path_factory)
    work = tmp_path / "w"
    args = ["--table", "mt", "--work", work, "--data", data["bin"], "--rows", "softmax,eva16", "--seeds", "1",
            "--epochs", "1", "--average", "1"]
    short = {"GEN_ARGS": "--max-len-a 0 --max-len-b 8"}  # an epoch's model would translate at length 200
    r = script(*args, env=short, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("softmax", "eva16"):
        result = json.loads((work / f"{row}-seed1" / "result.json").read_text())
        assert 0 <= result["bleu"] <= 100
        curve = [json.loads(x) for x in (work / f"{row}-seed1" / "curve.jsonl").read_text().splitlines()]
        assert curve and curve[-1]["updates"] > 0 and curve[-1]["cpu_s"] > 0
        assert "model.eva_window_size=2" in (work / f"{row}-seed1" / "command.txt").read_text() or row == "softmax"
    table = (work / "results.md").read_text()
    assert re.search(r"\| softmax \| 27.5 \| [\d.]+ \| - \| 1 \| [\d,]+ \| \d+ \| [\d.]+ \|", table), table
    assert "By the mean test BLEU" in table and (work / "curves.png").stat().st_size > 0
    again = script(*args, env=short, timeout=120)
    assert again.returncode == 0 and "training" not in again.stdout


def test_a_full_scale_curve_is_read_from_fairseqs_log(tmp_path):
    """Each validation of a run's train.log, timed by the wall clock of the training record before it."""
    (tmp_path / "train.log").write_text(
        '[2026-12-01 10:00:00,000][train_inner][INFO] - {"epoch": 1, "num_updates": "100", "wall": "50"}\n'
        "[2026-12-01 10:00:01,000][fairseq_cli.train][INFO] - begin validation on \"valid\" subset\n"
        '[2026-12-01 10:00:02,000][valid][INFO] - {"epoch": 1, "valid_loss": "7.5", "valid_num_updates": "120"}\n'
        '[2026-12-01 10:01:00,000][train][INFO] - {"epoch": 1, "train_loss": "7", "wall": "90"}\n'
        '[2026-12-01 10:01:01,000][valid][INFO] - {"epoch": 2, "valid_loss": "6.25", "valid_num_updates": "240"}\n')
    assert pt.curve_of("mt", tmp_path) == [(120, 50.0, 7.5), (240, 90.0, 6.25)]
