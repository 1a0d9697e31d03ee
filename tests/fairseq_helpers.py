"""Shared helpers of the fairseq and script tests: running fairseq's command-line tools
in subprocesses, parsing their logs, preparing subsets of the bundled sample once per test run, and
importing scripts/*.py as modules."""

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from benchmarks.common import fairseq_json_records as json_records  # noqa: F401 (the tests' name for it)

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "fairseq_eva")
SAMPLE = REPO / "data" / "sample"
BIN = Path(sys.executable).parent  # the virtual environment's fairseq-* scripts
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Sizes of the subsets used by the tests (the full sample is for scripts/sample_learning.sh).
MT_SIZES = {"train": 2000, "valid": 100, "test": 40}
LM_SIZES = {"train": 800, "valid": 100, "test": 100}
VOCAB = 1000

_CACHE = {}


def cli_env():
    env = dict(os.environ)
    # tiny models: one thread each avoids oversubscribing a small, shared machine
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run(tool, *args, cwd=None, input=None, timeout=600, check=True, env=None):
    """Run a fairseq command-line tool (or `python`) and return the CompletedProcess (text, merged logs);
    `env`: variables to set on top of cli_env()."""
    exe = sys.executable if tool == "python" else str(BIN / tool)
    proc = subprocess.run(
        [exe, *map(str, args)], cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout,
        env={**cli_env(), **(env or {})},
    )
    proc.log = proc.stdout + proc.stderr
    if check and proc.returncode != 0:
        raise AssertionError(f"{tool} failed ({proc.returncode}):\n{proc.log[-6000:]}")
    return proc


# Each job: a fairseq_cli tool and its arguments, or Python code. Its output (stderr too) lies between markers; an
# exception is reported by sys.excepthook, as the tool's own process reports it (one line for the plugin's errors).
# fairseq keeps a run's best validation loss on its save_checkpoint function: it is dropped before each job.
JOBS = r"""
import importlib, json, sys
sys.stderr = sys.stdout
for job in json.loads(sys.argv[1]):
    print("=== job " + job["name"], flush=True)
    status = 0
    try:
        from fairseq import checkpoint_utils
        vars(checkpoint_utils.save_checkpoint).pop("best", None)
        if "code" in job:
            sys.argv = ["python"]
            exec(job["code"], {})
        else:
            tool = importlib.import_module("fairseq_cli." + job["tool"])
            sys.argv = ["fairseq-" + job["tool"].replace("_", "-"), *map(str, job["args"])]
            tool.cli_main()
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    print(f"=== end {job['name']} {status}", flush=True)
"""


def run_jobs(jobs, cwd):
    """Run the jobs (name: (tool, *args) or {"code": ...}) in one process, so that fairseq is imported once;
    {name: (status, output)}."""
    listed = [{"name": name, "code": job["code"]} if isinstance(job, dict) else
              {"name": name, "tool": job[0], "args": [str(a) for a in job[1:]]} for name, job in jobs.items()]
    proc = run("python", "-c", JOBS, json.dumps(listed), cwd=cwd, input="", check=False)
    results = {}
    for name, body, status in re.findall(r"^=== job (\S+)\n(.*?)^=== end \1 (-?\d+)$", proc.stdout, re.M | re.S):
        results[name] = (int(status), body)
    assert set(results) == set(jobs), proc.log[-3000:]
    return results


def last_line(result):
    """The last line of a job that failed without a traceback."""
    status, output = result
    assert status != 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    return output.strip().splitlines()[-1]


def start_as_in_a_terminal(command, **popen):
    """Start a command in its own process group with SIGINT's default action, as in a terminal (a test run started
    in the background inherits it ignored); stdout and stderr are text pipes."""
    return subprocess.Popen([str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)


def press_ctrl_c(proc, timeout=60):
    """SIGINT to the process group, as Ctrl-C sends it; its (stdout, stderr) once it has ended, or the test fails
    (the group killed) if it is still running `timeout` seconds later."""
    import pytest

    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout} s after Ctrl-C:\n{(out + err)[-3000:]}")


def is_finite(x):
    return isinstance(x, float) and math.isfinite(x)


def _train_spm(raw_files, model_prefix):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(map(str, raw_files)), model_prefix=str(model_prefix), vocab_size=VOCAB,
        character_coverage=1.0, num_threads=1, minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=f"{model_prefix}.model")


def translation_data(tmp_path_factory):
    """en-de subsets, sentencepiece (joint, 1000 pieces), binarised with a joined dictionary. Once per test run."""
    if "mt" in _CACHE:
        return _CACHE["mt"]
    root = tmp_path_factory.mktemp("mt_data")
    raw = root / "raw"
    raw.mkdir()
    for split, n in MT_SIZES.items():
        for lang in ("en", "de"):
            lines = (SAMPLE / "po_en_de" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
            (raw / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sp = _train_spm([raw / "train.en", raw / "train.de"], root / "spm")
    for split in MT_SIZES:
        for lang in ("en", "de"):
            with open(raw / f"{split}.spm.{lang}", "w", encoding="utf-8") as out:
                for line in (raw / f"{split}.{lang}").read_text(encoding="utf-8").splitlines():
                    out.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
    run("fairseq-preprocess", "--source-lang", "en", "--target-lang", "de",
        "--trainpref", raw / "train.spm", "--validpref", raw / "valid.spm", "--testpref", raw / "test.spm",
        "--destdir", root / "bin", "--joined-dictionary", "--workers", "1", cwd=root)
    data = {"root": root, "bin": root / "bin", "spm": root / "spm.model", "raw": raw}
    _CACHE["mt"] = data
    return data


def lm_data(tmp_path_factory):
    """English prose subsets, sentencepiece (1000 pieces), binarised. Once per test run."""
    if "lm" in _CACHE:
        return _CACHE["lm"]
    root = tmp_path_factory.mktemp("lm_data")
    raw = root / "raw"
    raw.mkdir()
    for split, n in LM_SIZES.items():
        lines = (SAMPLE / "doc_en" / f"{split}.txt").read_text(encoding="utf-8").splitlines()[:n]
        (raw / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    sp = _train_spm([raw / "train.txt"], root / "spm")
    for split in LM_SIZES:
        with open(raw / f"{split}.spm", "w", encoding="utf-8") as out:
            for line in (raw / f"{split}.txt").read_text(encoding="utf-8").splitlines():
                out.write(" ".join(sp.encode(line.strip(), out_type=str)) + "\n")
    run("fairseq-preprocess", "--only-source", "--trainpref", raw / "train.spm", "--validpref", raw / "valid.spm",
        "--testpref", raw / "test.spm", "--destdir", root / "bin", "--workers", "1", cwd=root)
    data = {"root": root, "bin": root / "bin", "spm": root / "spm.model", "raw": raw}
    _CACHE["lm"] = data
    return data
