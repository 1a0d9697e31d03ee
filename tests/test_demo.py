"""`make demo` at a reduced size (environment overrides), so that the demo script cannot rot."""

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
    assert progress and all(re.fullmatch(r"epoch \d+, update \d+|==> .*|starting", p) for p in progress), progress
    table = (out / "results.md").read_text()
    assert table in r.stdout.replace("\r", "") or table.splitlines()[2] in r.stdout
    rows = [line for line in table.splitlines() if line.startswith("| EVA") or line.startswith("| softmax")]
    assert len(rows) == 3 and not any("n/a" in row for row in rows), table
    assert (out / "checkpoints" / "mt_eva" / "checkpoint_avg2.pt").exists()
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert re.search(r"demo done in \d+ s", r.stdout)
    # it refuses to wipe a folder that is not its own
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = demo(tmp_path / "mine", **SMALL)
    assert r.returncode != 0 and "is not a demo output folder" in r.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
