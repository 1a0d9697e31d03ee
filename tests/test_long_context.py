"""scripts/long_context.py (long-context runs at equal CPU time) and the per-layer reference
outputs of scripts/lm_diagnostics.py: argument errors, the rows' commands, the pure helpers, the report,
and (slow) the whole script end to end on a tiny corpus with a tiny budget."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from benchmarks.experiments import lm_diagnostics
from benchmarks.experiments import long_context as lc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "long_context.py")
ENV = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], "OMP_NUM_THREADS": "1",
       "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def script(*args, timeout=60):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def test_help_names_the_tasks():
    r = script("--help")
    assert r.returncode == 0 and "usage:" in r.stdout
    assert "{lm,mlm,approx,all}" in r.stdout and "--budget-minutes" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--rows", "softmax,performr"], "--rows: unknown row 'performr'; lm rows: softmax, exact, "
                                     "eva[-W-N][-nonoise|linear|identity|logsize|average|noattdrop|table], "
                                     "local[-W][-noattdrop|table], "
                                     "performer[-V], rfa[-V], elu, t2r[-V]\n"),
    (["--rows", "eva-64"], "--rows: unknown row 'eva-64'"),
    (["--task", "mlm", "--rows", "softmax-2"], "--rows: unknown row 'softmax-2'; mlm rows: softmax, exact, "),
    (["--task", "mlm", "--rows", "lara,Lara"], "lara[-V], linformer[-V], reformer[-V], combiner[-V], long_short[-V]\n"),
    (["--rows", "lara"], "--rows: row 'lara': lara attention is bidirectional only, no lm row; lm rows: softmax, "),
    (["--task", "mlm", "--rows", "elu-16"], "--rows: row 'elu-16': elu attention has no option that sets its cost; "
                                           "its row is elu"),
    (["--task", "mlm", "--tokens-per-sample", "384"], "(384) must be a multiple of row eva's mlm EVA window (256)"),
    (["--tokens-per-sample", "384"], "(384) must be a multiple of row eva's mlm EVA window (256)"),  # all: mlm too
    (["--tokens-per-sample", "200", "--task", "lm"], "multiple of row eva's lm EVA window (128)"),
    (["--tokens-per-sample", "512", "--task", "lm", "--rows", "local-96"], "multiple of row local-96's lm EVA window (96)"),
    (["--seeds", "1,two"], "--seeds '1,two': give whole numbers"),
    (["--budget-minutes", "0"], "--budget-minutes must be positive"),
    (["--parallel", "0"], "--parallel must be at least 1"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--task", "translation"], "invalid choice: 'translation'"),
])
def test_bad_arguments_are_refused_by_name(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        lc.parse_args(["corpus", "--work", str(tmp_path / "w"), *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_lm_blocks_need_only_the_lm_window(tmp_path):
    args = lc.parse_args(["corpus", "--work", str(tmp_path), "--task", "lm", "--tokens-per-sample", "384"])
    assert args.tasks == ("lm",) and args.rows == ["softmax", "eva", "local"] and args.seeds == [1]
    assert lc.parse_args(["corpus", "--work", str(tmp_path)]).tasks == ("lm", "mlm", "approx")


def test_approx_without_a_trained_eva_lm_stops_before_any_work(tmp_path):
    work = tmp_path / "work"
    r = script(tmp_path, "--work", work, "--task", "approx")
    assert r.returncode == 1 and "approx task needs the trained EVA language model" in r.stderr
    assert not work.exists()
    r = script(tmp_path, "--work", work, "--task", "all", "--rows", "softmax,local")  # eva not trained here either
    assert r.returncode == 1 and "approx task needs" in r.stderr


def test_a_corpus_without_its_splits_is_named(tmp_path):
    (tmp_path / "train.txt").write_text("a b c\n")
    r = script(tmp_path, "--work", tmp_path / "work", "--task", "lm")
    assert r.returncode == 1 and f"{tmp_path} has no valid.txt" in r.stderr


def test_row_options_say_each_rows_attention():
    lm, mlm = "--decoder-attention", "--encoder-attention"
    assert lc.row_options("lm", "softmax", 512) == [lm, "softmax"]
    assert lc.row_options("lm", "eva", 512) == [lm, "eva", "--eva-window-size", "128", "--eva-chunk-size", "8",
                                                "--eva-rpe", "true"]
    assert lc.row_options("lm", "exact", 512) == [lm, "eva", "--eva-window-size", "512", "--eva-chunk-size", "0",
                                                  "--eva-rpe", "true"]
    assert lc.row_options("lm", "local-64", 512)[3:6] == ["64", "--eva-chunk-size", "0"]
    assert lc.row_options("mlm", "eva", 4096) == [mlm, "eva", "--eva-window-size", "256", "--eva-num-chunks", "128",
                                                  "--eva-chunk-size", "0", "--eva-rpe", "true"]
    assert lc.row_options("mlm", "eva-512-128", 4096)[3:6] == ["512", "--eva-num-chunks", "128"]
    assert lc.row_options("mlm", "local", 4096)[3:6] == ["256", "--eva-num-chunks", "0"]
    assert lc.row_options("lm", "eva-nonoise", 512)[-2:] == ["--eva-omega-noise", "false"]
    assert lc.row_options("mlm", "eva-average", 512)[-2:] == ["--eva-proposal-mean", "average"]
    assert lc.row_options("mlm", "eva-noattdrop", 512)[-2:] == ["--attention-dropout", "0"]
    assert lc.row_options("mlm", "eva-32-16-linear", 512)[3:] == ["32", "--eva-num-chunks", "16", "--eva-chunk-size", "0",
                                                                  "--eva-rpe", "true", "--eva-proposal", "linear"]
    assert lc.row_options("lm", "eva-logsize", 512)[-2:] == ["--eva-chunk-logit-offset", "2.0794"]  # log 8
    assert lc.row_options("mlm", "eva-32-16-logsize", 512)[-2:] == ["--eva-chunk-logit-offset", "3.4657"]  # log 32
    assert lc.row_options("mlm", "eva-table", 512)[-2:] == ["--eva-rpe-type", "table"]
    assert lc.row_options("mlm", "local-64-table", 512)[2:] == ["--eva-window-size", "64", "--eva-num-chunks", "0",
                                                               "--eva-chunk-size", "0", "--eva-rpe", "true",
                                                               "--eva-rpe-type", "table"]
    assert lc.row_kind("local-table") == "local" and lc.row_kind("local-table-2") is None
    for bad in ("eva-0-8", "local-nonoise", "eva-identity-8", "local-logsize", "softmax-table", "exact-noattdrop"):
        with pytest.raises(ValueError, match=f"unknown row '{bad}'"):
            lc.row_options("lm", bad, 512)


def test_mechanism_rows_are_the_registrys_at_the_papers_settings_and_named_knob():
    lm, mlm = "--decoder-attention", "--encoder-attention"
    assert lc.row_options("lm", "performer", 2048) == [lm, "performer", "--performer-kernel", "positive",
                                                       "--performer-num-features", "97"]
    assert lc.row_options("mlm", "performer", 2048) == [mlm, "performer", "--performer-kernel", "relu",
                                                        "--performer-num-features", "193"]
    assert lc.row_options("mlm", "reformer", 2048)[2:5] == ["--reformer-num-hashes", "4", "--reformer-chunk-size"]
    assert lc.row_options("mlm", "linformer", 1024)[-2:] == ["--linformer-max-positions", "1024"]
    assert lc.row_options("mlm", "long_short", 2048)[2:4] == ["--long-short-window-size", "256"]
    assert lc.row_options("lm", "elu", 2048) == [lm, "elu"] and lc.row_options("mlm", "elu", 2048) == [mlm, "elu"]
    defaults = {"lm": {"performer": 97, "rfa": 64, "t2r": 96},  # as --help gives them
                "mlm": {"performer": 193, "rfa": 128, "t2r": 192, "lara": 128, "linformer": 193, "reformer": 42,
                        "combiner": 314, "long_short": 32}}
    for task, knobs in defaults.items():
        for row, value in knobs.items():
            options = lc.row_options(task, row, 2048)
            assert options[options.index(f"--{row}-{lc.mechanisms()[0].KNOBS[row]}".replace("_", "-")) + 1] == str(value)
    assert lc.row_options("lm", "performer-64", 2048)[-1] == "64"  # pinned
    assert lc.row_options("mlm", "long_short-16", 512, dim=64, heads=2)[-2:] == ["--long-short-num-landmarks", "16"]
    assert lc.row_kind("long_short-16") == "long_short" and lc.row_kind("eva-128-8") == "eva"
    assert lc.row_kind("eva-64") is None and lc.row_kind("bin") is None


@pytest.mark.parametrize("task, block, dim, heads", [("lm", 2048, 256, 4), ("mlm", 2048, 256, 4), ("lm", 512, 64, 2),
                                                     ("mlm", 1024, 128, 4)])
def test_mechanism_rows_cost_what_the_tasks_eva_row_costs(task, block, dim, heads):
    """Each knob is chosen by the registry's cost formulas: within 2% of the eva row's multiply-adds per token
    (its default setting) at the block length and width; elu, without a knob, costs 2 d D."""
    command = " ".join(lc.row_options(task, "eva", block) + ["--tokens-per-sample", str(block)])
    side = "decoder" if task == "lm" else "encoder"
    shape = f" --{side}-embed-dim {dim} --{side}-attention-heads {heads}"
    eva = lc.command_cost(command + shape)
    direction = "causal" if task == "lm" else "bidirectional"
    rows = [row for row in lc.mechanisms()[1].choices(direction) if row not in lc.KIND_ORDER]
    assert rows == ["performer", "rfa", "elu", "t2r"] + (["lara", "linformer", "reformer", "combiner", "long_short"]
                                                        if task == "mlm" else [])
    for row in rows:
        options = lc.row_options(task, row, block, dim, heads)
        cost = lc.command_cost(" ".join(options) + f" --tokens-per-sample {block}" + shape)
        if row == "elu":
            assert cost == 2 * dim // heads
        else:
            assert cost == pytest.approx(eva, rel=0.02), (row, options)


def test_a_rows_cost_is_read_from_its_command():
    assert lc.command_cost("_train BIN --save-dir x") is None
    assert lc.command_cost("--encoder-attention softmax --encoder-embed-dim 64 --encoder-attention-heads 2 "
                           "--tokens-per-sample 512") == 1024
    assert lc.command_cost("--decoder-attention eva --eva-window-size 128 --eva-chunk-size 8 --decoder-embed-dim 256 "
                           "--decoder-attention-heads 4 --tokens-per-sample 2048") == 386
    assert lc.command_cost("--encoder-attention performer --performer-kernel relu --performer-num-features 200 "
                           "--encoder-embed-dim 64 --encoder-attention-heads 2 --tokens-per-sample 512") == 800


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_rows_of_a_task_differ_only_by_their_attention_options(task, tmp_path):
    args = lc.parse_args(["corpus", "--work", str(tmp_path), "--budget-minutes", "12"])
    rows = ("softmax", "exact", "eva", "eva-512-16", "local", "local-512", "performer", "elu", "t2r-8",
            *(("linformer", "combiner") if task == "mlm" else ()))
    commands = {row: [str(c) for c in lc.train_command(args, "BIN", task, row)] for row in rows}
    stripped = set()
    for row, cmd in commands.items():
        options = lc.row_options(task, row, 2048)
        i = cmd.index(options[0])
        assert cmd[i:i + len(options)] == options
        save = cmd.index("--save-dir") + 1
        assert cmd[save] == str(tmp_path / (row if task == "lm" else f"mlm-{row}"))
        stripped.add(tuple(cmd[:i] + cmd[i + len(options):save]))
    assert len(stripped) == 1
    seed2 = [str(c) for c in lc.train_command(args, "BIN", task, "eva", seed=2)]
    assert seed2[seed2.index("--seed") + 1] == "2" and seed2[-1].endswith("eva-seed2")
    cmd = commands["eva"]
    assert cmd[cmd.index("--stop-time-hours") + 1] == "0.2" and cmd[cmd.index("--max-tokens") + 1] == "4096"
    assert ("--arch", "transformer_lm_eva" if task == "lm" else "roberta_eva") == tuple(cmd[cmd.index("--arch"):][:2])


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_a_gpu_row_trains_with_fp16_and_nothing_else_changes(task, tmp_path):
    cpu = [str(c) for c in lc.train_command(lc.parse_args(["corpus", "--work", str(tmp_path)]), "BIN", task, "eva")]
    cuda = [str(c) for c in lc.train_command(lc.parse_args(["corpus", "--work", str(tmp_path), "--device", "cuda"]),
                                             "BIN", task, "eva")]
    i = cpu.index("--cpu")
    assert "--cpu" not in cuda and cuda == cpu[:i] + ["--fp16"] + cpu[i + 1:]


def test_parallel_rows_run_at_once_and_every_row_and_seed_runs(tmp_path, monkeypatch):
    """With --parallel 2, two rows are inside train() together (the barrier would time out otherwise), and
    every (row, seed) is trained, then evaluated."""
    barrier, calls = threading.Barrier(2, timeout=10), []

    def train(args, bin_dir, task, row, seed, env):
        barrier.wait()
        calls.append(("train", row, seed))

    monkeypatch.setattr(lc, "prepare", lambda args, env: "BIN")
    monkeypatch.setattr(lc, "train", train)
    monkeypatch.setattr(lc, "evaluate", lambda args, bin_dir, task, row, seed, env: calls.append(("eval", row, seed)))
    monkeypatch.setattr(lc, "report", lambda args: None)
    monkeypatch.setattr(sys, "argv", [SCRIPT, "corpus", "--work", str(tmp_path), "--task", "mlm", "--rows", "eva,local",
                                      "--seeds", "1,2", "--parallel", "2"])
    lc.main()
    runs = {(row, seed) for row in ("eva", "local") for seed in (1, 2)}
    assert sorted(calls[:4]) == sorted(("train", *r) for r in runs)
    assert sorted(calls[4:]) == sorted(("eval", *r) for r in runs)


def test_sigterm_stops_the_training_with_the_driver(tmp_path):
    """Killing the driver (SIGTERM, as `kill` sends) stops the training it started instead of leaving it to
    train on unwatched, and says how to resume."""
    pid_file = tmp_path / "training.pid"
    training = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                "time.sleep(120)"]
    driver = ("import sys; from benchmarks.experiments import long_context as lc; "
              f"lc.prepare = lambda args, env: 'BIN'; lc.train_command = lambda *a: {training!r}; "
              f"sys.argv = ['long_context.py', 'corpus', '--work', {str(tmp_path)!r}, '--task', 'lm', '--rows', 'eva']; "
              "lc.main()")
    proc = subprocess.Popen([sys.executable, "-c", driver], env=ENV, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "run the same command again to resume" in err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["preprocess", "eval_lm", "validate"])
def test_fairseq_tools_run_without_their_console_scripts_on_path(name):
    """On a machine where fairseq was installed with `pip install --target`, its console scripts are not on PATH."""
    r = subprocess.run([*lc.fairseq_tool(name), "--help"], cwd=ROOT, env={**ENV, "PATH": ""}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout


@pytest.mark.slow
def test_a_failed_fairseq_tool_is_named_in_the_error(tmp_path):
    with pytest.raises(SystemExit, match=r"-m fairseq_cli\.validate failed \(exit 1\)"):
        lc.run([*lc.fairseq_tool("validate"), str(tmp_path / "missing"), "--task", "masked_lm"], ENV,
               str(tmp_path / "validate.log"))


def test_first_words_cuts_after_the_document_that_reaches_the_count(tmp_path):
    src, dst = tmp_path / "in.txt", str(tmp_path / "out.txt")
    src.write_text("one two\nthree\n\nfour five six\n\nseven\n")
    assert lc.first_words(str(src), dst, 3) == 3 and open(dst).read() == "one two\nthree\n"
    assert lc.first_words(str(src), dst, 4) == 6 and open(dst).read() == "one two\nthree\n\nfour five six\n"
    assert lc.first_words(str(src), dst, 0) == 7 and open(dst).read() == src.read_text()


def test_last_number_reads_fairseq_logs(tmp_path):
    path = tmp_path / "log"
    path.write_text("| valid on 'test' subset | loss 9.071 | ppl 537.87 | wps 0\n"
                    "INFO | Loss (base 2): 8.1, Perplexity: 12.50\nINFO | Perplexity: 11.25\n")
    assert lc.last_number(str(path), "| ppl ") == 537.87
    assert lc.last_number(str(path), "Perplexity: ") == 11.25
    with pytest.raises(SystemExit, match="no 'Accuracy:'"):
        lc.last_number(str(path), "Accuracy: ")


def fake_row(work, name, budget, test, load=None):
    d = work / name
    d.mkdir()
    (d / "done").write_text(f"{budget}\n")
    (d / "curve.jsonl").write_text("".join(json.dumps(p) + "\n" for p in (
        {"cpu_s": 30.0, "updates": 5, "ppl": 900.0}, {"cpu_s": 61.0, "updates": 10, "ppl": 400.0})))
    (d / "test_ppl.json").write_text(json.dumps(test))
    (d / "command.txt").write_text(f"_train BIN --save-dir {d}\n")
    if load:
        (d / "load.json").write_text(json.dumps(load))


def test_report_tables_each_finished_row_with_its_own_budget_and_load(tmp_path):
    fake_row(tmp_path, "softmax", 20.0, {"0": 101.5, "1024": 100.25})  # written before load.json existed
    fake_row(tmp_path, "mlm-eva", 12.0, {"test": 55.5}, {"start": [1.5, 1, 1], "end": [2.25, 2, 2]})
    (tmp_path / "eva").mkdir()  # not finished: left out
    (tmp_path / "approx.json").write_text(json.dumps({"blocks": 8, "length": 2048, "subset": "valid_small",
                                                      "layers": [{"eva": 0.25, "local": 0.5}, {"eva": 0.125, "local": 0.75}]}))
    args = lc.parse_args(["corpus", "--work", str(tmp_path)])
    lc.report(args)
    text = (tmp_path / "results.md").read_text()
    assert "| softmax | - | 1 | 20 | 10 | 61 | 400.00 | 101.50 | 100.25 | 1.2% | - |" in text
    assert "| eva |" not in text.split("## Masked")[0]
    assert "| eva | - | 1 | 12 | 10 | 61 | 400.00 | 55.50 | 1.50 / 2.25 |" in text
    assert "| 0 | 0.250 | 0.500 |\n| 1 | 0.125 | 0.750 |" in text
    assert f"`_train BIN --save-dir {tmp_path / 'mlm-eva'}`" in text
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "lm_curves.png").stat().st_size and (tmp_path / "mlm_curves.png").stat().st_size


def test_report_gives_each_seed_beside_the_mean_at_equal_updates_and_cpu_time(tmp_path):
    curves = {"local": [(60, 10, 400.0), (120, 20, 100.0)], "local-seed2": [(60, 10, 300.0), (120, 20, 200.0)],
              "eva-128-4": [(90, 10, 500.0), (180, 20, 250.0), (270, 30, 125.0)]}
    for name, points in curves.items():
        d = tmp_path / name
        d.mkdir()
        (d / "done").write_text(f"{points[-1][0] / 60:g}\n")  # the budget, in minutes
        (d / "curve.jsonl").write_text("".join(json.dumps({"cpu_s": c, "updates": u, "ppl": p}) + "\n" for c, u, p in points))
        (d / "test_ppl.json").write_text(json.dumps({"0": 100.0, "1024": 90.0}))
        (d / "command.txt").write_text("_train\n")
    lc.report(lc.parse_args(["corpus", "--work", str(tmp_path)]))
    text = (tmp_path / "results.md").read_text()
    assert "| eva-128-4 | - | 1 | 4.5 | 30 | 270 | 125.00 | 100.00 | 90.00 | 10.0% |" in text
    assert "| local | - | 2 | 2 (2, 2) | 20 (20, 20) | 120 (120, 120) | 150.00 (100.00, 200.00) |" in text
    equal_updates = text.split("at equal updates:")[1].split("perplexity at equal CPU time")[0]
    assert "| row | MACs/token (D) | 10 | 20 |" in equal_updates
    assert "| local | - | 350.00 (400.00, 300.00) | 150.00 (100.00, 200.00) |" in equal_updates
    equal_time = text.split("perplexity at equal CPU time")[1]
    assert "| row | MACs/token (D) | 1.1 | 2 | 2.2 | 3.4 | 4.5 |" in equal_time  # quarters of the largest budget, each budget
    assert "| eva-128-4 | - | - | 396.85 |" in equal_time  # geometric: 500 ** (2/3) * 250 ** (1/3)
    assert "| local | - | 318.15 (348.22, 288.08) | 150.00 (100.00, 200.00) | - | - | - |" in equal_time
    assert equal_time.index("eva-128-4") < equal_time.index("local")


def test_report_splits_a_row_whose_seeds_ran_to_different_budgets(tmp_path):
    """A seed resumed to a larger budget is not averaged with one that stopped earlier: one line per budget."""
    fake_row(tmp_path, "local", 60.0, {"0": 10.0, "1024": 10.0})
    fake_row(tmp_path, "local-seed2", 20.0, {"0": 12.0, "1024": 12.0})
    lc.report(lc.parse_args(["corpus", "--work", str(tmp_path)]))
    text = (tmp_path / "results.md").read_text()
    assert "| local (60 min) | - | 1 | 60 | 10 | 61 | 400.00 | 10.00 | 10.00 | 0.0% | - |" in text
    assert "| local (20 min) | - | 1 | 20 | 10 | 61 | 400.00 | 12.00 | 12.00 | 0.0% | - |" in text


def test_report_shows_mechanism_rows_with_their_cost_beside_the_name(tmp_path):
    """Rows named after other mechanisms are tabled like the others, after softmax, exact, eva and local and in the
    registry's order, each with its multiply-adds per token (units of D) read from its training command."""
    args = lc.parse_args(["corpus", "--work", str(tmp_path), "--task", "mlm", "--tokens-per-sample", "512", "--dim", "64",
                          "--heads", "2"])
    for row in ("long_short", "performer", "eva", "elu", "performer-seed2"):
        fake_row(tmp_path, f"mlm-{row}", 12.0, {"test": 50.0})
        command = lc.train_command(args, "BIN", "mlm", row.split("-seed")[0], seed=2 if "seed2" in row else 1)
        (tmp_path / f"mlm-{row}" / "command.txt").write_text(" ".join(map(str, command[2:])) + "\n")
    lc.report(args)
    text = (tmp_path / "results.md").read_text()
    assert "| eva | 770 | 1 | 12 | 10 | 61 | 400.00 | 50.00 | - |" in text  # 2 (256 + 128) D + 2 D
    assert "| performer | 772 | 2 | 12 (12, 12) |" in text  # 193 ReLU features, 4 m D
    assert "| long_short | 770 | 1 |" in text and "| elu | 64 | 1 |" in text  # 2 d D
    equal_updates = text.split("at equal updates:")[1]
    assert "| performer | 772 | 900.00 (900.00, 900.00) | 400.00 (400.00, 400.00) |" in equal_updates
    table = text.split("## Masked language model")[1].split("valid_small perplexity")[0]
    assert [line.split(" | ")[0] for line in table.splitlines() if line.startswith("| ") and "MACs" not in line] == [
        "| eva", "| performer", "| elu", "| long_short"]


def test_ppl_at_cpu_interpolates_in_log_perplexity_and_not_beyond_the_curve():
    curve = [{"cpu_s": 0, "ppl": 100.0}, {"cpu_s": 10, "ppl": 1.0}]
    assert lc.ppl_at_cpu(curve, 5) == pytest.approx(10.0) and lc.ppl_at_cpu(curve, 11) is None


# ------------------------------------------------------------------ lm_diagnostics.reference_outputs

torch = pytest.importorskip("torch")


def eva_layer(window, chunk_size, length=64, dim=32, heads=2, chunk_logit_offset=0.0):
    from fairseq_eva.attention import EVAAttention

    torch.manual_seed(0)
    attn = EVAAttention(dim, heads, causal=True, window_size=window, chunk_size=chunk_size,
                        chunk_logit_offset=chunk_logit_offset).double().eval()
    with torch.no_grad():  # a bias that matters
        for p in attn.rpe.parameters():
            p.normal_()
    return attn, torch.randn(2, length, dim, dtype=torch.float64)


@torch.no_grad()
def test_reference_outputs_local_equals_eva_without_chunks():
    attn, x = eva_layer(window=16, chunk_size=0)
    y = lm_diagnostics.reference_outputs(attn, x)
    assert torch.allclose(y["eva"], y["local"], atol=1e-10)
    assert (y["eva"] - y["softmax"]).abs().max() > 1e-2  # later windows miss the earlier keys


@torch.no_grad()
def test_reference_outputs_agree_when_one_window_covers_the_sequence():
    attn, x = eva_layer(window=64, chunk_size=8)
    y = lm_diagnostics.reference_outputs(attn, x)
    assert torch.allclose(y["eva"], y["softmax"], atol=1e-10) and torch.allclose(y["local"], y["softmax"], atol=1e-10)
    attn, x = eva_layer(window=16, chunk_size=8)  # the first window alone is exact in all three
    y = lm_diagnostics.reference_outputs(attn, x)
    for name in ("eva", "local"):
        assert torch.allclose(y[name][..., :16, :], y["softmax"][..., :16, :], atol=1e-10)
        assert (y[name][..., 16:, :] - y["softmax"][..., 16:, :]).abs().max() > 1e-2


@torch.no_grad()
def test_diagnostics_move_a_chunk_logit_offset_back_to_the_chunks():
    """A layer trained with --eva-chunk-logit-offset b holds its bias b too low: the diagnostics' exact softmax and
    its statistics see the bias of the layer without it, and the chunk logits raised by b."""
    plain, x = eva_layer(window=16, chunk_size=8)
    shifted, _ = eva_layer(window=16, chunk_size=8, chunk_logit_offset=2.0)  # the same parameters
    diagnostics = lm_diagnostics
    assert torch.allclose(diagnostics.reference_outputs(shifted, x)["softmax"],
                          diagnostics.reference_outputs(plain, x)["softmax"], atol=1e-10)
    a, b = diagnostics.layer_stats(plain, x), diagnostics.layer_stats(shifted, x)
    assert a["exact mass outside E"] == pytest.approx(b["exact mass outside E"], abs=1e-9)
    assert a["lse far keys - lse chunks"] - b["lse far keys - lse chunks"] == pytest.approx(2.0, abs=1e-9)
    assert b["EVA mass on chunks"] > a["EVA mass on chunks"] + 0.05


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_whole_script_on_a_tiny_corpus_then_resumes_without_work(tmp_path):
    work = tmp_path / "work"
    args = [os.path.join(ROOT, "data", "sample", "doc_en"), "--work", work, "--budget-minutes", "0.05",
            "--tokens-per-sample", "256", "--layers", "1", "--dim", "32", "--ffn", "64", "--heads", "2", "--vocab", "300",
            "--validate-every", "4", "--valid-words", "2000", "--train-words", "30000", "--approx-blocks", "2"]
    r = script(*args, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for row in ("softmax", "eva", "local", "mlm-softmax", "mlm-eva", "mlm-local"):
        curve = [json.loads(x) for x in open(work / row / "curve.jsonl")]
        assert curve and curve[-1]["cpu_s"] >= 3 and all(p["ppl"] > 1 for p in curve), row
        assert float((work / row / "done").read_text()) == 0.05
        assert set(json.loads((work / row / "load.json").read_text())) == {"start", "end"}
    assert set(json.loads((work / "eva" / "test_ppl.json").read_text())) == {"0", "128"}
    assert set(json.loads((work / "mlm-eva" / "test_ppl.json").read_text())) == {"test"}
    errors = json.loads((work / "approx.json").read_text())
    assert errors["blocks"] == 2 and len(errors["layers"]) == 1
    assert 0 < errors["layers"][0]["eva"] < 2 and 0 < errors["layers"][0]["local"] < 2
    text = (work / "results.md").read_text()
    assert "## Language model" in text and "## Masked language model" in text and "## Approximation" in text
    assert (work / "lm_curves.png").exists() and (work / "mlm_curves.png").exists()
    before = {row: (work / row / "train.log").stat().st_mtime for row in ("eva", "mlm-eva")}
    r = script(*args, timeout=120)  # everything done: nothing retrains
    assert r.returncode == 0 and "training" not in r.stdout, r.stdout
    assert before == {row: (work / row / "train.log").stat().st_mtime for row in before}


@pytest.mark.slow
def test_mechanism_rows_train_evaluate_and_show_their_cost_in_the_report(tmp_path):
    """Rows named after other mechanisms (two masked LMs, one LM) through the whole path: training, test
    perplexity and the report with their multiply-adds per token."""
    work = tmp_path / "work"
    args = [os.path.join(ROOT, "data", "sample", "doc_en"), "--work", work, "--budget-minutes", "0.05",
            "--tokens-per-sample", "256", "--layers", "1", "--dim", "32", "--ffn", "64", "--heads", "2", "--vocab", "300",
            "--validate-every", "4", "--valid-words", "2000", "--train-words", "30000"]
    for task, rows in (("mlm", "performer,long_short"), ("lm", "t2r")):
        r = script(*args, "--task", task, "--rows", rows, timeout=900)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for row in ("mlm-performer", "mlm-long_short", "t2r"):
        curve = [json.loads(x) for x in open(work / row / "curve.jsonl")]
        assert curve and all(p["ppl"] > 1 for p in curve), row
        assert all(ppl > 1 for ppl in json.loads((work / row / "test_ppl.json").read_text()).values()), row
    command = (work / "mlm-performer" / "command.txt").read_text()
    assert "--encoder-attention performer --performer-kernel relu --performer-num-features 193" in command
    text = (work / "results.md").read_text()
    # eva's cost at 256 tokens: mlm 2 (256 + 128) D + 2 D = 770 D, lm 2 (64 + 16) D + 2 D = 162 D
    assert "| performer | 772 | 1 |" in text and "| long_short | 770 | 1 |" in text and "| t2r | 160 | 1 |" in text


def test_loss_by_position_averages_doubling_ranges():
    nll = torch.arange(24, dtype=torch.float64).reshape(2, 12)
    by = lm_diagnostics.loss_by_position(nll)
    assert list(by) == ["0-0", "1-1", "2-3", "4-7", "8-11"]
    assert by["0-0"] == 6.0 and by["2-3"] == 8.5 and by["8-11"] == (sum(range(8, 12)) + sum(range(20, 24))) / 8
    assert list(lm_diagnostics.loss_by_position(nll[:, :8])) == ["0-0", "1-1", "2-3", "4-7"]
