"""scripts/paper_table.py, the paper's tables in one command each: the full-size commands against the configs
(through the training scripts' own dry run), the orderings against the seeds' spread, argument errors, and the
translation table at sample scale end to end on a tiny subset of the sample."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.experiments import paper_table as pt
from fairseq_helpers import REPO, cli_env, translation_data

SCRIPT = str(REPO / "scripts" / "paper_table.py")


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
    assert alone == ("Not ordered (a row of one seed has no spread; give more --seeds): a ? c, a ? d, a ? b, c ? b, "
                     "d ? b.")


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
    (["--table", "mt", "--seeds", "1,2,1"], "--seeds '1,2,1': seed 1 given twice"),
    (["--table", "lm", "--seeds", "3,3"], "--seeds '3,3': seed 3 given twice"),
    (["--table", "mt", "--rows", "eva16,softmax,eva16"], "--rows: eva16 given twice"),
    (["--table", "mt", "--epochs", "0"], "--epochs 0: give 1 or more (fairseq reads 0 as no limit of epochs)"),
    (["--table", "mt", "--epochs", "-3"], "--epochs -3: give 1 or more"),
    (["--table", "mt", "--epochs", "1"], "--epochs 1 is fewer than --average 3, the last epoch checkpoints averaged "
                                         "for the evaluation: give --average 1 or less, or --epochs 3 or more"),
    (["--table", "mt", "--epochs", "2", "--average", "4", "--dry-run"], "--epochs 2 is fewer than --average 4"),
    (["--table", "mt", "--data", "no_such_folder"], "--data no_such_folder is not a folder: give the DEST of "
                                                    "data_prep/prepare_wmt14_en_de.sh"),
])
def test_bad_arguments_are_refused_by_name(args, message, tmp_path):
    r = script("--work", tmp_path / "w", *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "w").exists()


def test_full_scale_without_a_gpu_is_refused_unless_allowed(tmp_path):
    """A researcher who asks for the paper's sizes on a machine with no GPU is told, before anything is made; the
    dry run still prints the commands."""
    args = ["--table", "mt", "--scale", "full", "--data", tmp_path / "data", "--work", tmp_path / "w", "--seeds", "1"]
    r = script(*args, env={"NGPUS": "0"})
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "error: --scale full trains the paper's full-size models, and there is no GPU here (torch sees none, or "
        "NGPUS=0): on a CPU that takes weeks. Use --scale sample, or give --allow-cpu to train at full size on the "
        "CPU anyway")
    assert not (tmp_path / "w").exists()
    assert script(*args, "--dry-run", env={"NGPUS": "0"}).returncode == 0
    assert "--allow-cpu" in script("--help").stdout


@pytest.fixture
def data(tmp_path):
    """A folder that looks like binarised translation data (what the checks before training look at)."""
    d = tmp_path / "data"
    d.mkdir()
    for lang in ("en", "de"):
        (d / f"dict.{lang}.txt").write_text("a 1\n")
    return d


def test_the_sample_dry_run_prints_commands_one_can_run(data, tmp_path):
    """The data's preparation (without --data), each run's fairseq-hydra-train and evaluation, with --data's
    folder; the training command is one that fairseq-hydra-train takes as it is (hydra's --cfg job checks it)."""
    work = tmp_path / "w"
    r = script("--table", "mt", "--work", work, "--rows", "eva16", "--seeds", "2", "--epochs", "2", "--average", "2",
               "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert lines[0].endswith("data_prep/prepare_wmt14_en_de.sh --raw " + pt.SAMPLE) and f"DEST={work}/data-bin" in lines[0]
    assert " _train " not in r.stdout and not work.exists()
    r = script("--table", "mt", "--work", work, "--data", data, "--rows", "eva16", "--seeds", "2", "--epochs", "2",
               "--average", "2", "--dry-run")
    assert r.returncode == 0, r.stderr
    train, evaluate = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert "prepare_wmt14_en_de" not in r.stdout
    assert f"task.data={data} " in train and "data-bin" not in train
    assert evaluate.endswith(f"scripts/eval_wmt14.sh {work}/eva16-seed2") and f"DATA={data} N_AVG=2" in evaluate
    words = shlex.split(train)
    env = dict(w.split("=", 1) for w in words[:2])
    assert words[2] == "fairseq-hydra-train"
    shown = subprocess.run([*words[2:], "--cfg", "job"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**cli_env(), **env, "PATH": os.path.dirname(sys.executable) + os.pathsep
                                + os.environ["PATH"]})
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "max_epoch: 2" in shown.stdout and "eva_window_size: 2" in shown.stdout
    assert not work.exists()


def test_a_run_trained_with_other_settings_is_neither_reused_nor_mixed(data, tmp_path):
    """A run's folder records its settings: a later command with others stops before anything is trained, naming
    the difference (a dry run too); --report refuses a table of runs of different settings."""
    work = tmp_path / "w"
    first = pt.parse_args(["--table", "mt", "--work", str(work), "--data", str(data), "--epochs", "1", "--average", "1"])
    save = work / "softmax-seed1"
    save.mkdir(parents=True)
    pt.keep_settings(first, save)
    args = ["--table", "mt", "--work", work, "--data", data, "--rows", "softmax,eva16", "--seeds", "1", "--average", "1"]
    for extra in ([], ["--dry-run"]):
        r = script(*args, "--epochs", "2", "--lr", "0.02", *extra)
        assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
            f"error: {save} was trained with --epochs 1, --lr 0.01, and this run asks for --epochs 2, --lr 0.02: give "
            "its settings to resume or report it, or another --work for these"), r.stderr
    assert sorted(p.name for p in work.iterdir()) == ["softmax-seed1"]
    assert sorted(p.name for p in save.iterdir()) == ["settings.json"]
    other = pt.parse_args(["--table", "mt", "--work", str(work), "--data", str(data), "--epochs", "3", "--average", "1"])
    for row, settings in (("softmax", first), ("eva16", other)):
        save = work / f"{row}-seed1"
        save.mkdir(exist_ok=True)
        pt.keep_settings(settings, save)
        (save / "result.json").write_text(json.dumps({"bleu": 1.0, "sacrebleu": 1.0}))
        (save / "trained.json").write_text(json.dumps({"params": 10}))
    r = script("--table", "mt", "--work", work, "--report")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        f"error: {work}/eva16-seed1 was trained with --epochs 3, and {work}/softmax-seed1 with --epochs 1: one table "
        "compares runs of one setting; report them from separate --work folders"), r.stderr


def test_the_report_names_the_runs_present_and_claims_no_ordering_from_one_seed(tmp_path):
    work = tmp_path / "w"
    for row, seed, bleu in (("softmax", 4, 2.0), ("eva16", 4, 1.0), ("eva16", 5, 1.5)):
        save = work / f"{row}-seed{seed}"
        save.mkdir(parents=True)
        (save / "result.json").write_text(json.dumps({"bleu": bleu, "sacrebleu": bleu}))
        (save / "trained.json").write_text(json.dumps({"params": 10}))
    r = script("--table", "mt", "--work", work, "--report")
    assert r.returncode == 0, r.stderr
    table = (work / "results.md").read_text()
    assert "Runs: softmax (seed 4), eva16 (seeds 4, 5)." in table
    assert "Not ordered (a row of one seed has no spread; give more --seeds): softmax ? eva16." in table
    assert "softmax > " not in table and "softmax ~ " not in table and "Apart by more" not in table


def test_sigterm_stops_and_reaps_the_training_once_and_exits_as_terminated(tmp_path):
    """SIGTERM while the driver waits for a training (a script that runs its own child, as the training scripts
    run fairseq-hydra-train): both are stopped, each waited for once, and the driver exits with 128 + 15."""
    pid_file = tmp_path / "pid"
    code = ("from benchmarks.experiments import long_context as lc; "
            f"lc.stopping_cleanly(lambda: lc.run(['bash', '-c', 'sh -c \"echo $$ > {pid_file}; exec sleep 300\"; "
            f"true'], None, {str(tmp_path / 'log')!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.1)
        grandchild = int(pid_file.read_text())
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == "stopped by signal 15: run the same command again to resume"
    for _ in range(100):  # the training's own child, stopped (reaped by its parent, or gone to init)
        try:
            state = open(f"/proc/{grandchild}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {grandchild} still runs")


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
