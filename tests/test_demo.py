"""`make demo` at a reduced size (environment overrides), so that the demo script cannot rot."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SMALL = {
    "DEMO_TRAIN_LINES": "600", "DEMO_EVAL_LINES": "24", "DEMO_BPE_TOKENS": "200", "DEMO_MT_EPOCHS": "2",
    "DEMO_MT_MAX_TOKENS": "1024", "DEMO_N_AVG": "2", "DEMO_LM_UPDATES": "6", "DEMO_LM_MAX_TOKENS": "1024",
    "DEMO_LM_LENGTH": "64", "DEMO_LM_CONTEXTS": "0 32", "DEMO_PROGRESS": "2",
}


FIXTURES = os.path.join(ROOT, "tests", "fixtures", "demo")


def log_progress(log):
    r = subprocess.run(["bash", "-c", 'source scripts/lib.sh && log_progress "$1"', "-", str(log)], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    return r.stdout.strip()


def test_progress_follows_a_training_log_through_validation(tmp_path):
    """log_progress (the demo's progress lines) on a captured fairseq-hydra-train log, line by line: it
    never falls back to "starting" once training has begun, and a validation shows its loss."""
    lines = open(os.path.join(FIXTURES, "train_mt_eva.log"), encoding="utf-8").read().splitlines(keepends=True)
    log = tmp_path / "train_mt_eva.log"
    seen = []
    for n in range(len(lines) + 1):
        log.write_text("".join(lines[:n]), encoding="utf-8")
        if not seen or lines[n - 1].split("]")[1:2] in (["[train_inner"], ["[valid"], ["[train"]):
            seen.append(log_progress(log))
    assert seen == ["starting", "epoch 1, update 5", "epoch 1, update 5, valid loss 11.514", "epoch 1, update 5",
                    "epoch 2, update 10", "epoch 2, update 10, valid loss 11.512", "epoch 2, update 10"]
    assert log_progress(log) == "epoch 2, update 10"  # after training: where it ended
    # a job without training records: its last step
    log.write_text("==> mt_eva: scripts/eval_wmt14.sh\n\n==> fairseq-generate test: beam 4\nsome output\n")
    assert log_progress(log) == "==> fairseq-generate test: beam 4"
    assert log_progress(tmp_path / "not_yet.log") == "starting"


def demo(out, **env):
    return subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHON": sys.executable,
                               "DEMO_OUT": str(out), **env})


@pytest.mark.slow
def test_demo_small(tmp_path):
    out = tmp_path / "demo"
    r = demo(out, **SMALL)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    headers = re.findall(r"^################ \[(\d)/6\]", r.stdout, re.M)
    assert headers == ["1", "2", "3", "4", "5", "6"]
    # live progress: each job and log as it starts, then where the running jobs are
    for name in ("train_mt_eva", "train_mt_softmax", "eval_mt", "train_lm_eva"):
        assert re.search(rf"^  started {name}: ", r.stdout, re.M), name
    assert f"  log: {out}/logs/train_mt_eva.log" in r.stdout
    progress = re.findall(r"^  \[\+\d+ s\] train_mt_eva: (.+)  \(2 epochs of configs/wmt14_en_de_eva32.yaml, tiny\)$",
                          r.stdout, re.M)
    assert progress and all(re.fullmatch(r"(epoch \d+, update \d+(, valid loss [\d.]+)?|==> .*|starting)(, for \d+ s)?", p)
                            for p in progress), progress
    assert all(a != b for a, b in zip(progress, progress[1:])), progress  # a line when it changed (or "for N s")
    assert "starting" not in progress[progress.index(next(p for p in progress if p.startswith("epoch"))):]
    # where the time went: each stage's wall time, at the end
    times = re.search(r"^where the time went .*\n((?:  .*\n){6})", r.stdout, re.M)
    assert times and all(re.search(r"\d+ s$", line) for line in times.group(1).splitlines()), r.stdout[-2000:]
    table = (out / "results.md").read_text()
    assert table in r.stdout.replace("\r", "") or table.splitlines()[2] in r.stdout
    rows = [line for line in table.splitlines() if line.startswith("| EVA") or line.startswith("| softmax")]
    assert len(rows) == 3 and not any("n/a" in row for row in rows), table
    assert (out / "checkpoints" / "mt_eva" / "checkpoint_avg2.pt").exists()
    numbers = json.loads((out / "results.json").read_text(encoding="utf-8"))  # the demo's record
    for name in ("mt_eva", "mt_softmax"):
        mt = numbers["translation"][name]
        assert mt["updates"] > 0 and mt["bleu_compound_split"] is not None and mt["sacrebleu"] is not None
        assert [set(t) for t in mt["first_test_translations"]] == [{"source", "reference", "hypothesis"}] * 3
    assert [r["context"] for r in numbers["language_model"]["lm_eva"]["ppl"] if r["subset"] == "test"] == [0, 32]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert re.search(r"demo done in \d+ s", r.stdout)
    # it refuses to wipe a folder that is not its own
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = demo(tmp_path / "mine", **SMALL)
    assert r.returncode != 0 and "is not a demo output folder" in r.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
