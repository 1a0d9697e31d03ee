"""scripts/: every script's --help and clear errors, the update_freq that keeps the paper's effective
batch, and multi-node launches (dry runs: no GPU needed)."""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
ENV = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
SHELL_SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "scripts", "*.sh"))
                       if not p.endswith("lib.sh"))


def run(args, env=None):
    return subprocess.run(args, cwd=ROOT, env={**ENV, **(env or {})}, capture_output=True, text=True)


def test_every_script_is_strict_and_has_help():
    expected = {"demo.sh", "eval_lm.sh", "eval_mlm.sh", "eval_wmt14.sh", "train_mlm.sh", "train_wikitext103.sh",
                "train_wmt14.sh"}
    assert expected <= set(SHELL_SCRIPTS)
    for name in SHELL_SCRIPTS + ["../data_prep/prepare_wmt14_en_de.sh", "../data_prep/prepare_wikitext103.sh",
                                 "../data_prep/prepare_mlm.sh"]:
        path = os.path.join(ROOT, "scripts", name)
        assert "set -euo pipefail" in open(path).read(), name
        r = run(["bash", path, "--help"])
        assert r.returncode == 0 and r.stdout.startswith("usage:"), (name, r.stderr)
    for name in ("average_checkpoints.py", "demo_report.py"):
        r = run([sys.executable, os.path.join(ROOT, "scripts", name), "--help"])
        assert r.returncode == 0 and "usage:" in r.stdout


@pytest.mark.parametrize("args", [[], ["--bogus"], ["a", "b"]])
def test_sample_learning_starts_nothing_without_its_work_folder(args, tmp_path):
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "sample_learning.sh"), *args], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("usage:") and "error: " in r.stderr
    assert r.stdout == "" and not list(tmp_path.iterdir())


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "dict.txt").write_text("a 1\n")
    return str(d)


def dry(script, variant, data, **env):
    r = run(["bash", f"scripts/{script}", variant, "optimization.max_update=10"],
            {"DRY_RUN": "1", "DATA": data, "SAVE_DIR": "/tmp/unused", **env})
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


@pytest.mark.parametrize(
    "script, variant, env, update_freq, world",
    [
        ("train_wmt14.sh", "eva32", {"NGPUS": "8"}, 1, 8),  # 4096 x 8 = 32768 tokens
        ("train_wmt14.sh", "eva16", {"NGPUS": "2"}, 4, 2),
        ("train_wmt14.sh", "softmax", {"NGPUS": "1", "MAX_TOKENS": "2048"}, 16, 1),
        ("train_wikitext103.sh", "eva_16l", {"NGPUS": "1"}, 8, 1),  # 8192 x 8 = 65536 tokens
        ("train_wikitext103.sh", "softmax_32l", {"NGPUS": "4"}, 2, 4),
        ("train_mlm.sh", "eva_2048", {"NGPUS": "4"}, 4, 4),  # 16 x 4 x 4 = 256 sequences
        ("train_mlm.sh", "eva_4096", {"NGPUS": "8"}, 4, 8),  # 8 x 8 x 4 = 256
        ("train_mlm.sh", "softmax_4096", {"NGPUS": "1", "UPDATE_FREQ": "3"}, 3, 1),
    ],
)
def test_update_freq_keeps_the_effective_batch(script, variant, env, update_freq, world, data):
    out, err = dry(script, variant, data, **env)
    cmd = out.splitlines()[-1]
    # one process: fairseq-hydra-train itself; several: torchrun starts them (tests/test_fix_distributed.py)
    assert re.match(r"\+ (torchrun --standalone --nproc-per-node \d+ \S*)?fairseq-hydra-train --config-dir", cmd)
    assert cmd.startswith("+ torchrun") == (world > 1)
    assert f"optimization.update_freq=[{update_freq}]" in cmd
    assert f"distributed_training.distributed_world_size={world}" in cmd
    assert f"task.data={data}" in cmd and "common.user_dir=" in cmd and cmd.endswith("optimization.max_update=10")
    assert ("differs from the paper's" in err) == ("UPDATE_FREQ" in env)


def test_dry_run_prints_a_command_that_a_shell_reads_back(data):
    """DRY_RUN=1 prints the command to paste: a shell (strict about globs, as zsh is) must read back its words,
    hydra's `${oc.env:RANK}` and the `[N]` lists included."""
    out, _ = dry("train_wmt14.sh", "eva16", data, NGPUS="0", NPROC_PER_NODE="2")
    cmd = out.splitlines()[-1].removeprefix("+ ")
    r = subprocess.run(["bash", "-O", "failglob", "-c", f"printf '%s\\n' {cmd}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    words = r.stdout.splitlines()
    assert words == shlex.split(cmd) and words[0] == "torchrun"
    assert "distributed_training.distributed_rank=${oc.env:RANK}" in words and "optimization.update_freq=[4]" in words
    assert words[-1] == "optimization.max_update=10"


def test_lib_sh_run_by_itself_says_what_it_is():
    r = run(["bash", "scripts/lib.sh", "--help"])
    assert r.returncode == 0 and r.stdout.startswith("usage:") and "sourced" in r.stdout
    r = run(["bash", "scripts/lib.sh"])
    assert r.returncode == 1 and "usage:" in r.stderr and r.stdout == ""


def test_cpu_training_turns_fp16_off(data):
    out, _ = dry("train_wmt14.sh", "eva64", data, NGPUS="0")
    assert "common.cpu=true common.fp16=false" in out


def test_multi_node_goes_through_torchrun(data):
    env = {"NGPUS": "8", "NNODES": "2"}
    r = run(["bash", "scripts/train_wmt14.sh", "eva32"], {"DRY_RUN": "1", "DATA": data, **env})
    assert r.returncode != 0 and "needs NODE_RANK and MASTER_ADDR" in r.stderr
    out, err = dry("train_wmt14.sh", "eva32", data, NODE_RANK="1", MASTER_ADDR="10.0.0.1", **env)
    cmd = out.splitlines()[-1]
    assert re.search(r"^\+ torchrun --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr 10.0.0.1 "
                     r"--master-port 29500 \S*fairseq-hydra-train ", cmd)
    assert "distributed_world_size=16" in cmd and "update_freq=[1]" in cmd
    assert "differs from the paper's" in err  # 4096 x 16 > 32768: the paper's batch cannot be matched


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["scripts/train_wmt14.sh", "eva99"], {}, "unknown VARIANT 'eva99'"),
        (["scripts/train_wmt14.sh"], {}, "give a VARIANT"),
        (["scripts/train_wmt14.sh", "eva32"], {"DATA": "/nonexistent"}, "no binarised data in '/nonexistent'"),
        (["scripts/train_wikitext103.sh", "eva_16l"], {"DATA": "/nonexistent"}, "run data_prep/prepare_wikitext103.sh"),
        (["scripts/train_mlm.sh", "eva_2048"], {"DATA": "/nonexistent"}, "run data_prep/prepare_mlm.sh"),
        (["scripts/eval_wmt14.sh", "/nonexistent/checkpoint.pt"], {"DATA": "@data"},
         "no checkpoint '/nonexistent/checkpoint.pt'"),
        (["scripts/eval_lm.sh", "/nonexistent/checkpoint.pt"], {"DATA": "@data"}, "no checkpoint '/nonexistent/checkpoint.pt'"),
        (["scripts/eval_mlm.sh", "/nonexistent/checkpoint.pt"], {"DATA": "@data"}, "no checkpoint '/nonexistent/checkpoint.pt'"),
        (["scripts/eval_lm.sh", "x.pt"], {"DATA": "/nonexistent"}, "no binarised data in '/nonexistent'"),
        (["scripts/demo.sh", "extra"], {}, "no arguments expected"),
        (["scripts/demo.sh"], {"DEMO_SAMPLE": "/nonexistent", "DEMO_OUT": "@out"}, "missing /nonexistent/po_en_de/train.en"),
    ],
)
def test_clear_errors(args, env, message, data, tmp_path):
    env = {k: (data if v == "@data" else str(tmp_path / "out") if v == "@out" else v) for k, v in env.items()}
    r = run(["bash", *args], env)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


@pytest.mark.slow
def test_eval_lm_failure_leaves_nothing_behind(tmp_path, data):
    out = tmp_path / "out"
    out.mkdir()
    bad = out / "checkpoint_best.pt"
    bad.write_text("not a checkpoint\n")
    r = run(["bash", "scripts/eval_lm.sh", str(bad)], {"DATA": data, "NGPUS": "0", "CONTEXTS": "0"})
    assert r.returncode != 0
    assert "fairseq-eval-lm failed on valid, context window 0" in r.stderr
    assert f"{bad} is not a fairseq checkpoint" in r.stderr  # the end of its log is shown
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint_best.pt"]
    r = run(["bash", "scripts/eval_lm.sh", str(bad)], {"DATA": data, "NGPUS": "0", "CONTEXTS": "0",
                                                       "OUT": str(tmp_path / "results")})
    assert r.returncode != 0 and not (tmp_path / "results").exists()  # an OUT it made goes too


def test_eval_lm_into_an_out_folder_it_makes_exits_0(tmp_path, data):
    """The table is written into a new OUT, which stays, and the script's status is its own, not its clean-up's
    (fairseq-eval-lm is a stand-in that prints what it prints)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "fairseq-eval-lm").write_text("#!/bin/sh\necho 'Loss (base 2): 3.0000, Perplexity: 8.00'\n")
    (tools / "fairseq-eval-lm").chmod(0o755)
    ckpt = tmp_path / "checkpoint_best.pt"
    ckpt.write_text("x")
    out = tmp_path / "new" / "results"
    r = run(["bash", "scripts/eval_lm.sh", str(ckpt)], {"DATA": data, "NGPUS": "0", "CONTEXTS": "0", "SUBSETS": "test",
                                                        "OUT": str(out), "PATH": f"{tools}{os.pathsep}{ENV['PATH']}"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(f"results: {out}/ppl.tsv")
    assert (out / "ppl.tsv").read_text().splitlines()[1] == "test\t0\t3.0000\t8.00"


def test_eval_wmt14_refuses_a_reference_that_is_not_utf8(tmp_path, data):
    ref = tmp_path / "ref.de"
    ref.write_bytes(b"Gut.\nCaf\xe9\n")
    (tmp_path / "checkpoint.pt").write_text("x")
    r = run(["bash", "scripts/eval_wmt14.sh", str(tmp_path / "checkpoint.pt")], {"DATA": data, "REF": str(ref)})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: {ref} line 2 is not UTF-8 (byte 0xe9 at byte 4 of the line): convert it to UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line"]


def test_eval_wmt14_refuses_too_few_checkpoints(tmp_path, data):
    """Too few epoch checkpoints to average: one line that offers N_AVG=0 (no averaging) and the count there is."""
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    r = run(["bash", "scripts/eval_wmt14.sh", str(ckpts)], {"DATA": data, "N_AVG": "10"})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: {ckpts} holds 0 epoch checkpoints (checkpoint<N>.pt), fewer than N_AVG=10: "
        "set N_AVG=0 to evaluate its checkpoint_best.pt without averaging"]
    for name in ("checkpoint1.pt", "checkpoint2.pt", "checkpoint_last.pt", "checkpoint_1_500.pt"):
        (ckpts / name).write_text("x")
    r = run(["bash", "scripts/eval_wmt14.sh", str(ckpts)], {"DATA": data, "N_AVG": "3"})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        f"error: {ckpts} holds 2 epoch checkpoints (checkpoint<N>.pt), fewer than N_AVG=3: "
        "set N_AVG=2 to average those, or N_AVG=0 to evaluate its checkpoint_best.pt without averaging"]
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint1.pt", "checkpoint2.pt", "checkpoint_1_500.pt",
                                                      "checkpoint_last.pt"]


@pytest.mark.slow
def test_a_save_dir_override_makes_no_default_folder(tmp_path, tmp_path_factory):
    """`train_wmt14.sh VARIANT checkpoint.save_dir=X` trains into X: the default SAVE_DIR is not made; and the run,
    stopped by a misspelled key before training, leaves no X either."""
    from fairseq_helpers import translation_data

    data = str(translation_data(tmp_path_factory)["bin"])
    default, chosen = tmp_path / "default", tmp_path / "chosen"
    r = run(["bash", "scripts/train_wmt14.sh", "eva16", f"checkpoint.save_dir={chosen}", "+model.eva_windw_size=8"],
            {"DATA": data, "SAVE_DIR": str(default), "NGPUS": "0"})
    assert r.returncode != 0
    assert "model.eva_windw_size is not an option of transformer_eva_wmt_en_de" in r.stderr + r.stdout
    assert not default.exists() and not chosen.exists()


@pytest.mark.parametrize("script, variant, prep", [("train_wmt14.sh", "eva16", "prepare_wmt14_en_de.sh"),
                                                   ("train_wikitext103.sh", "eva_16l", "prepare_wikitext103.sh"),
                                                   ("train_mlm.sh", "eva_2048", "prepare_mlm.sh")])
def test_a_dry_run_needs_no_data(script, variant, prep, tmp_path):
    """DRY_RUN=1 prints the command without the data, and says that the data is not there yet."""
    missing = tmp_path / "data-bin"
    r = run(["bash", f"scripts/{script}", variant], {"DRY_RUN": "1", "DATA": str(missing), "NGPUS": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].startswith("+ fairseq-hydra-train ") and f"task.data={missing}" in r.stdout
    assert f"note: no binarised data in '{missing}' (no dict*.txt) yet: run data_prep/{prep} before the command" in r.stderr
    assert not missing.exists()


@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_scripts_make_openmp_threads_sleep_while_they_wait(given, expected):
    """Every script sources lib.sh, which sets OMP_WAIT_POLICY=PASSIVE unless the user chose a policy
    (benchmarks/busy_machine.py measures why)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    child = 'import os; print(os.environ["OMP_WAIT_POLICY"])'
    r = subprocess.run(["bash", "-c", 'source scripts/lib.sh && "$PYTHON" -c "$CHILD"'], cwd=ROOT,
                       env={**env, "PYTHON": sys.executable, "CHILD": child}, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr


def test_a_copied_script_without_the_plugin_beside_it_stops_with_one_line(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("lib.sh", "eval_lm.sh"):
        (scripts / name).write_text(open(os.path.join(ROOT, "scripts", name)).read())
    r = run(["bash", str(scripts / "eval_lm.sh"), "--help"])
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"error: no fairseq_eva plugin at '{tmp_path}/fairseq_eva' (the --user-dir the scripts "
                        "pass): run the scripts from the repository's scripts/ folder\n")


def test_a_run_at_a_commit_is_a_clean_clone_at_it(tmp_path):
    """scripts/at_commit.sh runs the command in a clone at the commit given and names that commit; the same folder
    is used again for a resumed run, and a clone whose tracked files have changed is refused, by it and by
    paper_table.py's --record (whose meta.json would name a commit that did not run)."""
    head = run(["git", "rev-parse", "HEAD"]).stdout.strip()
    work = tmp_path / "run"
    command = ["bash", "scripts/at_commit.sh", "--no-setup", "HEAD", str(work), "--"]
    for _ in range(2):  # a new clone, then the same one again
        r = run(command + ["git", "rev-parse", "HEAD"])
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["commit", head, head]
        assert (work / "commit.txt").read_text().strip() == head
    (work / "README.md").write_text("changed\n")
    r = run(command + ["true"])
    assert r.returncode == 1 and "has changes to its tracked files" in r.stderr, r.stderr
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file").write_text("")
    r = run(["bash", "scripts/at_commit.sh", "--no-setup", "HEAD", str(tmp_path / "other"), "--", "true"])
    assert r.returncode == 1 and "exists and is not a clone" in r.stderr, r.stderr
