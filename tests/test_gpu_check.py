"""The GPU check (benchmarks/gpu_check.py, `make gpu-check`) as far as a CPU can run it: the correctness
table against the float64 reference, the summary, the refusal without CUDA; its fairseq part without --fp16
(slow). On a machine with CUDA the `cuda` tests run the real thing."""

import math
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu_check

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_correctness_table_on_the_cpu():
    rows = gpu_check.correctness(torch.device("cpu"), ("float32",))
    assert len(rows) == 2 * 3 + 1 + 2 * 2  # (bidirectional, causal) x (train, blockwise, eval), decoding, dropout
    assert all(r["ok"] for r in rows), rows
    assert all(r["output_error"] < 1e-5 for r in rows if "dropout" not in r["check"]), rows
    text = gpu_check.summary({"device": "cpu", "torch": torch.__version__, "correctness": rows, "errors": {}})
    assert text.count("| yes |") == len(rows)


def test_relative_error_flags_a_wrong_output():
    ref = torch.randn(100, dtype=torch.float64)
    assert gpu_check.relative_error(ref.float(), ref) < 1e-7
    assert gpu_check.relative_error(ref.float() * 1.01, ref) == pytest.approx(0.01, rel=1e-3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_refuses_to_run_without_cuda():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], capture_output=True, text=True)
    assert proc.returncode != 0 and "no CUDA device" in proc.stderr


@pytest.mark.slow
def test_fairseq_part_on_the_cpu(tmp_path):
    rows = gpu_check.fairseq_check(str(tmp_path), True, device_args=("--cpu",), updates=3, data=str(tmp_path / "data"))
    assert len(rows) == 4 and all(r["finite"] and math.isfinite(r["last_loss"]) for r in rows), rows


@needs_cuda
def test_cuda_correctness():
    rows = gpu_check.correctness(torch.device("cuda"))
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
