"""The GPU check (benchmarks/gpu_check.py, `make gpu-check`) as far as a CPU can run it: the correctness
table against the float64 reference, the time budgets, the FLOP count and the targets, the refusal without
CUDA, the quick profile's choice of parts, rows and budgets, and (slow) the whole check and the quick profile
(through benchmarks/gpu_check_quick.sh) with --smoke, on the CPU. On a machine with CUDA the `cuda` test runs
the correctness part for real."""

import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def correctness_rows(*args, **kwargs):
    rows = []
    gpu_check.correctness(*args, emit=rows.append, **kwargs)
    return rows


def test_correctness_table_on_the_cpu():
    rows = correctness_rows(torch.device("cpu"), ("float32",), 100, kernels=("no-such-kernel", "blockwise"))
    missing, *measured = rows
    assert missing["kernel"] == "no-such-kernel" and missing["status"] == "n/a" and "no-such-kernel" in missing["note"]
    # (bidirectional, causal) x (train, eval), decoding, (bidirectional, causal) x (replay, mean of draws)
    assert len(measured) == 2 * 2 + 1 + 2 * 2
    assert all(r["kernel"] == "blockwise" and r["status"] == "ok" for r in measured), measured
    assert all(r["output_error"] < 1e-5 for r in measured if "dropout" not in r["check"]), measured
    text = gpu_check.summary(dict(result(), correctness={"rows": rows}))
    assert text.count("| ok |") == len(measured) and "9 ok, 0 FAIL, 1 n/a, 0 skipped" in text


def test_a_wrong_result_is_a_failed_row_and_a_refusal_is_not():
    row = dict(kernel="k", check="c", precision="float32", bound=1e-4)
    assert gpu_check.attempt(row, lambda: (0.5, 0.5, False))["status"] == "FAIL"
    refusal = gpu_check.attempt(row, lambda: (_ for _ in ()).throw(ValueError("the EVA kernel 'k' cannot run this call")))
    assert refusal["status"] == "n/a" and "cannot run" in refusal["note"]
    crash = gpu_check.attempt(row, lambda: 1 / 0)
    assert crash["status"] == "FAIL" and "ZeroDivisionError" in crash["note"]


def test_the_interpreters_bfloat16_is_not_a_triton_failure():
    """On the CPU (Triton's interpreter, --smoke) the Triton kernel's bfloat16 rows are n/a, not run; on a GPU
    they run, and other kernels run everywhere."""
    broken = lambda: 1 / 0  # noqa: E731
    row = dict(kernel="triton", check="c", precision="autocast-bfloat16", bound=5e-2)
    assert gpu_check.attempt(row, broken, "cpu")["status"] == "n/a"
    assert gpu_check.attempt(row, broken, "cuda")["status"] == "FAIL"
    assert gpu_check.attempt(dict(row, kernel="fused"), broken, "cpu")["status"] == "FAIL"
    assert gpu_check.attempt(dict(row, precision="float32"), broken, "cpu")["status"] == "FAIL"


def test_relative_error_flags_a_wrong_output():
    ref = torch.randn(100, dtype=torch.float64)
    assert gpu_check.relative_error(ref.float(), ref) < 1e-7
    assert gpu_check.relative_error(ref.float() * 1.01, ref) == pytest.approx(0.01, rel=1e-3)


def test_a_spent_budget_skips_what_is_left(tmp_path):
    """Past its deadline a part writes what it skipped, and starts nothing."""
    rows = correctness_rows(torch.device("cpu"), ("float32",), 10, kernels=("blockwise",), deadline=0)
    assert [r["status"] for r in rows] == ["skipped"]
    emitted = []
    speed_rows = gpu_check.speed_part([(256, 2), (512, 1)], "auto", torch.device("cpu"), torch.float32, 1, 0.0, 0, emitted.append)
    assert [r["error"] for r in speed_rows] == [gpu_check.OUT_OF_TIME] * 2 and emitted
    profile_rows = gpu_check.profile_part(256, 2, "auto", torch.device("cpu"), torch.float32, 0, lambda rows: None)
    assert [r["error"] for r in profile_rows] == [gpu_check.OUT_OF_TIME] * len(gpu_check.PROFILE_LAYERS)
    mode_rows = gpu_check.modes_part([(256, 1)], ("none", "default"), "auto", torch.device("cpu"), torch.float32, 0,
                                     lambda rows: None)
    assert mode_rows and all(r["error"] == gpu_check.OUT_OF_TIME for r in mode_rows)
    for check in (gpu_check.paper_configs, gpu_check.clean_exit_check):
        runs = check(gpu_check.settings(True), {"mt": "-", "lm": "-"}, str(tmp_path), 0, lambda rows: None)
        assert runs and all(r["error"] == gpu_check.OUT_OF_TIME for r in runs)
    assert not list(tmp_path.iterdir())  # no run started


def test_a_layer_that_fails_is_a_row_not_a_lost_table():
    """The EVA layers refuse an unknown kernel; the SDPA layers are still timed, and their ratio to nothing is not made."""
    cpu = torch.device("cpu")
    rows = gpu_check.speed_part([(256, 1)], "no-such-kernel", cpu, torch.float32, 1, 0.0, math.inf, lambda r: None)
    failed = {r["mechanism"] for r in rows if "error" in r}
    assert failed == {m for m in gpu_check.LAYERS if m.startswith("eva")}
    assert all("no-such-kernel" in r["error"] for r in rows if "error" in r)
    assert {r["mechanism"] for r in rows if "layer_s" in r} == {"sdpa", "sdpa-causal", "projections"}
    assert gpu_check.ratios(rows) == []


def test_attention_flops_count():
    """At N = 8192, 8 heads, d = 64, bidirectional EVA's attention is 22.5 GFLOP forward + backward,
    21x fewer than softmax's (abs(E) + C = 384 keys a query against 8192)."""
    eva, sdpa = gpu_check.attention_flops("eva", 1, 8192), gpu_check.attention_flops("sdpa", 1, 8192)
    assert eva == pytest.approx(22.5e9, rel=5e-3) and sdpa / eva == pytest.approx(8192 / 384)
    assert gpu_check.attention_flops("sdpa-causal", 2, 8192) == sdpa  # half the logits, twice the batch
    causal = gpu_check.attention_flops("eva-causal+rpe+dropout", 1, 8192)
    assert causal == pytest.approx(14 * 64 * 8192 * (128 / 2 + 8192 / 16) * 8)


def result(**parts):
    return dict(device="cpu", smoke=True, date="today", settings=gpu_check.settings(True), parts={}, auto_kernel={},
                versions=dict(torch="t", triton="x", python="p", commit="c"), **parts)


def test_targets_read_the_tables():
    ratios = [dict(mechanism="eva", baseline="sdpa", N=8192, layer_speedup=6.0, memory_ratio=1.3),
              dict(mechanism="eva+rpe+dropout", baseline="eva", N=8192, layer_speedup=1 / 1.05)]
    runs = [dict(run="mlm_eva_4096", words_per_second=150.0), dict(run="mlm_softmax_4096", words_per_second=120.0)]
    found = {(t["quantity"], t["mechanism"], t["N"]): t for t in
             gpu_check.targets(result(speed_tokens={"ratios": ratios}, paper_configs={"rows": runs}))}
    assert found[("speed-up", "eva", 8192)]["met"] is True
    assert found[("memory ratio", "eva", 8192)]["met"] is False
    assert found[("time ratio", "eva+rpe+dropout", 8192)]["value"] == pytest.approx(1.05)
    assert found[("time ratio", "eva+rpe+dropout", 8192)]["met"] is True
    assert found[("words/s ratio", "mlm_eva_4096", None)]["value"] == pytest.approx(1.25)
    assert found[("words/s ratio", "mlm_eva_4096", None)]["met"] is False
    assert found[("speed-up", "eva", 32768)]["met"] is None  # not measured


def test_modes_measure_every_layer_eager_before_compiling_any():
    """Eager rows (cheap) come first, so a spent budget costs compiled rows only; SDPA runs eager only."""
    rows = gpu_check.mode_rows([(8192, 8), (1024, 1)], ("none", "reduce-overhead", "default"))
    modes = [mode for *_, mode in rows]
    assert modes == ["none"] * 12 + ["reduce-overhead"] * 8 + ["default"] * 8
    assert all(name.startswith("eva") for _, _, name, mode in rows if mode != "none")


def test_modes_table_reads_the_earlier_record_and_the_batch1_target():
    """The eager rows carry the earlier check's time of the same layer and shape (the record's commit beside it);
    the batch-1 target takes the fastest mode against SDPA eager."""
    recorded = gpu_check.recorded_times(gpu_check.BEFORE)
    ms, commit = recorded[(1024, 1, "eva")]
    assert ms > 0 and commit == "38d2946" and (8192, 8, "eva-causal+rpe+dropout") in recorded
    timed = dict(N=1024, batch=1, host_ms=0.5, gpu_ms=0.4, tflops=1.0, first_call_s=1.0)
    rows = [dict(timed, mechanism="sdpa", mode="none", wall_ms=1.0), dict(timed, mechanism="eva", mode="none", wall_ms=3.0),
            dict(timed, mechanism="eva", mode="reduce-overhead", wall_ms=1.2),
            dict(N=1024, batch=1, mechanism="eva", mode="default", error="boom")]
    ratios = gpu_check.mode_ratios(rows)
    assert [(r["mode"], r["vs_sdpa"], r["vs_eager"]) for r in ratios] == [("none", 3.0, 1.0),
                                                                         ("reduce-overhead", 1.2, pytest.approx(0.4))]
    found = {(t["quantity"], t["mechanism"]): t for t in gpu_check.targets(result(modes={"rows": rows, "ratios": ratios}))}
    target = found[("time ratio, fastest mode, batch 1", "eva")]
    assert target["value"] == pytest.approx(1.2) and target["met"] is True
    assert found[("time ratio, fastest mode, batch 1", "eva-causal")]["met"] is None
    text = gpu_check.summary(result(modes={"rows": rows, "ratios": ratios}))
    assert "| 1024 | 1 | eva | reduce-overhead | 1.20 |" in text and "| 1024 | 1 | eva | default | boom |" in text


def test_only_the_control_run_may_fail():
    run = dict(run="translation, EVA encoder", returncode=0)
    control = dict(run="the same, clean_exit switched off (control)", returncode=-6)
    assert not gpu_check.failed(result(clean_exit={"rows": [run, control]}))
    assert gpu_check.failed(result(clean_exit={"rows": [dict(run, returncode=-6), control]}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_profile_counts_device_events_once():
    """The GPU time is the device-side events' alone (an operator's own device time would count its kernels
    twice), summed by kernel name; with no device events there is none."""
    class Event:
        def __init__(self, name, device, us):
            self.name, self.device_type = name, device
            self.time_range = type("Range", (), {"elapsed_us": lambda self: us})()

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [Event("aten::mm", cpu, 900.0), Event("gemm", cuda, 300.0), Event("gemm", cuda, 200.0),
              Event("eva_forward", cuda, 1000.0)]
    total, by_name = gpu_check.kernel_times(events)
    assert total == pytest.approx(1.5) and by_name == pytest.approx({"gemm": 0.5, "eva_forward": 1.0})
    assert gpu_check.kernel_times(events[:1]) == (None, {})


def test_profile_on_the_cpu():
    """Each EVA layer gets its time and host time a call, and the host operators that cost most."""
    rows = gpu_check.profile_part(64, 1, "auto", torch.device("cpu"), torch.float32, math.inf, lambda rows: None)
    assert [r["mechanism"] for r in rows] == list(gpu_check.PROFILE_LAYERS)
    for r in rows:
        assert r["wall_ms"] > 0 and r["host_ms"] > 0 and r["gpu_ms"] is None and r["bound"] is None
        assert len(r["costliest"]) == 6 and all(ms >= 0 for _, ms in r["costliest"])


def test_refuses_to_run_without_cuda():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "no CUDA device" in proc.stderr and "--smoke" in proc.stderr


@pytest.mark.slow
def test_smoke_run_writes_every_part(tmp_path):
    """`--smoke`: the whole check on the CPU at tiny sizes, through its command line; its JSON and markdown
    hold every part."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.gpu_check", "--smoke", "--out", str(out), "--work", str(tmp_path / "work")]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    data = json.loads((out / "gpu_check.json").read_text())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert sorted(os.listdir(out)) == ["gpu_check.json", "gpu_check.md"]
    assert len(list((tmp_path / "work" / "logs").iterdir())) == 2 + 6 + 2  # preprocess, paper configs, clean exit
    assert list(data["parts"]) == list(gpu_check.PARTS) and all(p["status"] == "ok" for p in data["parts"].values())
    s = gpu_check.settings(True)
    correctness = data["correctness"]["rows"]
    assert {r["kernel"] for r in correctness} == set(gpu_check.KERNELS)
    assert any(r["kernel"] == "blockwise" and r["status"] == "ok" for r in correctness)
    for key, shapes in (("speed_tokens", [(N, s["tokens"] // N) for N in s["token_lengths"]]),
                        ("speed_batch1", [(N, 1) for N in s["batch1_lengths"]])):
        rows = data[key]["rows"]
        assert {(r["N"], r["batch"], r["mechanism"]) for r in rows} == {
            (N, B, m) for N, B in shapes for m in [*gpu_check.LAYERS, "projections"]}
        assert all(r["layer_s"] > 0 and r["peak_bytes"] > 0 for r in rows)
        assert all(r["tflops"] > 0 for r in rows if r["mechanism"] != "projections")
        assert {(x["mechanism"], x["baseline"]) for x in data[key]["ratios"]} >= {("eva", "sdpa"), ("eva-causal", "sdpa-causal")}
    modes = {(r["mechanism"], r["mode"]): r for r in data["modes"]["rows"]}
    assert set(modes) == {(m, "none") for m in gpu_check.MODE_LAYERS} | {
        (m, "default") for m in gpu_check.MODE_LAYERS if m.startswith("eva")}
    for (name, mode), r in modes.items():
        if mode == "default" and "+rpe+dropout" in name:  # no kernel that torch.compile traces takes it on a CPU
            assert "torch.compile cannot trace it" in r["error"], r
        else:
            assert r["wall_ms"] > 0 and r["host_ms"] > 0 and r["tflops"] > 0 and r["first_call_s"] > 0, r
    runs = data["paper_configs"]["rows"] + data["clean_exit"]["rows"]
    assert [r["run"] for r in data["paper_configs"]["rows"]] == [c for e, _, b in gpu_check.PAPER_CONFIGS for c in (e, b)]
    for r in runs:
        assert r["returncode"] == 0 and r["done"] and not r["aborted"], r
        assert r["intervals"] == s["updates"] and math.isfinite(r["last_loss"]) and r["words_per_second"] > 0, r
    text = (out / "gpu_check.md").read_text()
    for title in ("Correctness against the float64 CPU reference", f"{s['tokens']} tokens a call", "batch 1",
                  "The layer as users run it",
                  "fairseq-hydra-train", "Clean exit", "Where a layer's time goes", "Speed targets"):
        assert title in text
    assert proc.stdout.count("[gpu_check]") == len(gpu_check.PARTS)


QUICK_SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check_quick.sh")


def planned_correctness_rows(monkeypatch, s):
    """The correctness rows a profile's settings ask for, listed without computing any (no reference, no kernel)."""
    references = [(name, side, mode, *[None] * 6) for name, side in (("bidirectional", "left"), ("causal", "right"))
                  for mode in ("train", "eval")]
    monkeypatch.setattr(gpu_check, "reference_cases", lambda: references)
    monkeypatch.setattr(gpu_check, "attempt", lambda row, compute, device=None: dict(row, status="planned"))
    return correctness_rows(torch.device(s["device"]), s["precisions"], s["draws"], kernels=s["kernels"])


@pytest.mark.parametrize("smoke", [False, True])
def test_quick_profile_chooses_parts_rows_and_budgets(monkeypatch, smoke):
    """--quick: correctness, paper_configs, then modes (its budget an estimate, so last), within their budgets;
    the Triton kernel's rows in float32 and bfloat16, both directions, training and evaluation, decoding and
    dropout; the modes table's every row, the batch-1 target's first among the compiled ones."""
    args = gpu_check.parse_args(["--quick"] + ["--smoke"] * smoke)
    assert args.parts == list(gpu_check.QUICK_PARTS) == ["correctness", "paper_configs", "modes"]
    assert args.budget == sum(gpu_check.QUICK_BUDGETS.values()) == 410
    assert gpu_check.parse_args(["--quick", "--parts", "modes", "correctness"]).parts == ["correctness", "modes"]
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--quick", "--parts", "speed_tokens"])
    assert gpu_check.parse_args([]).parts == list(gpu_check.PARTS) and gpu_check.parse_args([]).budget == 925

    s, full = gpu_check.settings(smoke, quick=True), gpu_check.settings(smoke)
    rows = planned_correctness_rows(monkeypatch, s)
    assert {r["kernel"] for r in rows} == {"triton"} and {r["precision"] for r in rows} == {"float32", "bfloat16"}
    assert [r["check"] for r in rows if r["precision"] == "bfloat16"] == [
        "bidirectional, left padding, train", "bidirectional, left padding, eval", "causal, right padding, train",
        "causal, right padding, eval", "causal, incremental decoding = full forward"]
    dropout = [r["check"] for r in rows if "dropout" in r["check"]]
    assert len(rows) == 14 and len(dropout) == 4 and {c.split(",")[0] for c in dropout} == {"bidirectional", "causal"}
    if not smoke:  # on a GPU, rows of the full check's
        assert {(r["check"], r["precision"]) for r in rows} <= {
            (r["check"], r["precision"]) for r in planned_correctness_rows(monkeypatch, full) if r["kernel"] == "triton"}

    # the modes table: the full check's rows, batch 1 first, and each mode of plain EVA and causal EVA at batch 1
    # before any layer with RPE + dropout or any larger batch
    modes = gpu_check.mode_rows(s["mode_shapes"], s["modes"], s["mode_order"])
    assert sorted(modes) == sorted(gpu_check.mode_rows(full["mode_shapes"], full["modes"]))
    compiled = [row for row in modes if row[3] != "none"]
    assert modes[:len(modes) - len(compiled)] == [row for row in modes if row[3] == "none"]
    if not smoke:
        assert s["mode_shapes"] == [(1024, 1), (8192, 8)]
        assert compiled[:4] == [(1024, 1, name, mode) for name in ("eva", "eva-causal")
                                for mode in ("reduce-overhead", "default")]
    assert {k: v for k, v in s.items() if k not in ("kernels", "precisions", "mode_shapes", "mode_order")} == {
        k: v for k, v in full.items() if k not in ("kernels", "precisions", "mode_shapes", "mode_order")}


def test_quick_profile_fits_its_job():
    """The quick profile's budgets come under the full check's, and with the set-up, the start-up and a row past
    its deadline they fit QUICK_CALL; gpu_check_quick.sh stops the check at QUICK_LIMIT."""
    assert set(gpu_check.QUICK_BUDGETS) == set(gpu_check.QUICK_PARTS)
    assert all(b <= gpu_check.BUDGETS[p] for p, b in gpu_check.QUICK_BUDGETS.items())
    budgets = sum(gpu_check.QUICK_BUDGETS.values())
    assert budgets + sum(gpu_check.QUICK_OUTSIDE.values()) <= gpu_check.QUICK_CALL == 8 * 60
    outside = gpu_check.QUICK_OUTSIDE
    assert outside["start-up"] + budgets + outside["a row past its deadline"] <= gpu_check.QUICK_LIMIT
    assert gpu_check.QUICK_LIMIT + outside["set-up"] <= gpu_check.QUICK_CALL
    with open(QUICK_SCRIPT) as f:
        script = f.read()
    assert f"TIME_LIMIT=${{TIME_LIMIT:-{gpu_check.QUICK_LIMIT}}}" in script
    # the summary states the budgets, also where --smoke does not apply them
    text = gpu_check.summary(result(plan=dict(profile="quick", parts=list(gpu_check.QUICK_PARTS),
                                              budgets=gpu_check.QUICK_BUDGETS, budget=budgets)))
    assert "the quick profile (--quick), --smoke" in text
    assert "correctness 60 + paper_configs 270 + modes 80 s; the whole check 410 s (not applied on the CPU)" in text


def test_quick_script_stops_where_python_cannot_run_the_check(tmp_path):
    """gpu_check_quick.sh checks its Python before it starts the check, and says what it lacks."""
    proc = subprocess.run(["bash", QUICK_SCRIPT, str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHON": "/bin/false"}, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "/bin/false cannot import torch, fairseq" in proc.stdout
    assert (tmp_path / "out" / "setup.log").exists() and not (tmp_path / "out" / "gpu_check.json").exists()


@pytest.mark.slow
def test_quick_smoke_run_through_its_script(tmp_path):
    """gpu_check_quick.sh --smoke: the quick profile on the CPU at tiny sizes, as the one command a CUDA machine
    runs; its parts and rows, and its budgets stated (a CPU applies none)."""
    out = tmp_path / "out"
    proc = subprocess.run(["bash", QUICK_SCRIPT, str(out), "--smoke"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "work")})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert sorted(os.listdir(out)) == ["gpu_check.json", "gpu_check.log", "gpu_check.md", "setup.log"]
    data = json.loads((out / "gpu_check.json").read_text())
    assert list(data["parts"]) == list(gpu_check.QUICK_PARTS) and all(p["status"] == "ok" for p in data["parts"].values())
    assert data["plan"] == dict(profile="quick", parts=list(gpu_check.QUICK_PARTS), budgets=gpu_check.QUICK_BUDGETS,
                                budget=sum(gpu_check.QUICK_BUDGETS.values()))
    assert all(p["budget"] == math.inf for p in data["parts"].values())  # --smoke: none applied
    assert not any(key in data for key in ("speed_tokens", "speed_batch1", "clean_exit", "profile"))
    s = gpu_check.settings(True, quick=True)
    correctness = data["correctness"]["rows"]
    assert len(correctness) == 14 and {r["kernel"] for r in correctness} == {"triton"}
    assert {r["precision"] for r in correctness} == {"float32", "bfloat16"}
    # on the CPU: Triton's interpreter where Triton is installed (TRITON_INTERPRET=1), never for bfloat16
    assert all(r["status"] in ("ok", "n/a") for r in correctness)
    assert all(r["status"] == "n/a" for r in correctness if r["precision"] == "bfloat16")
    modes = [(r["N"], r["batch"], r["mechanism"], r["mode"]) for r in data["modes"]["rows"]]
    assert modes == gpu_check.mode_rows(s["mode_shapes"], s["modes"], s["mode_order"])
    assert all("wall_ms" in r or "torch.compile cannot trace it" in r["error"] for r in data["modes"]["rows"])
    runs = data["paper_configs"]["rows"]
    assert [r["run"] for r in runs] == [c for e, _, b in gpu_check.PAPER_CONFIGS for c in (e, b)]
    assert all(r["returncode"] == 0 and r["done"] and r["words_per_second"] > 0 for r in runs), runs
    text = (out / "gpu_check.md").read_text()
    assert "the quick profile (--quick), --smoke" in text and "the whole check 410 s (not applied on the CPU)" in text
    for absent in ("tokens a call", "Clean exit", "Where a layer's time goes", "speed-up: eva vs sdpa"):
        assert absent not in text
    assert re.search(r"\[gpu_check_quick\] set-up: \d+ s", proc.stdout)
    assert proc.stdout.count("[gpu_check] ") == len(gpu_check.QUICK_PARTS)


@needs_cuda
def test_cuda_correctness():
    rows = correctness_rows(torch.device("cuda"), tuple(gpu_check.BOUNDS), 400)
    assert all(r["status"] != "FAIL" for r in rows), [r for r in rows if r["status"] == "FAIL"]


def test_docs_and_makefile_say_what_the_code_runs():
    """docs/gpu_check.md's budget tables are BUDGETS and QUICK_BUDGETS; its split commands run every part once,
    each with its parts' budgets added up, in the minutes the page says; the page, the Makefile and the module
    say the same length of the whole check and of the quick profile."""
    with open(os.path.join(ROOT, "docs", "gpu_check.md")) as f:
        page = f.read()
    full_section = page.split("## What it runs")[1].split("## The quick profile")[0]
    quick_section = page.split("## The quick profile")[1].split("## What it writes")[0]
    full = {m[0]: int(m[1]) for m in re.findall(r"^\| `(\w+)` \|.* \| (\d+) \|$", full_section, re.M)}
    assert full == gpu_check.BUDGETS
    quick = {m[0]: int(m[1]) for m in re.findall(r"^\| `(\w+)` \| [^|]+ \| (\d+) \|", quick_section, re.M)}
    assert quick == gpu_check.QUICK_BUDGETS
    start_up = gpu_check.QUICK_OUTSIDE["start-up"]
    whole = round((sum(gpu_check.BUDGETS.values()) + start_up) / 60)
    assert f"about {whole} minutes" in page and f"({sum(gpu_check.BUDGETS.values())} s of budgets" in page
    assert f"`--budget` {sum(gpu_check.QUICK_BUDGETS.values())}" in page

    commands = re.findall(r"^python -m benchmarks.gpu_check .*--parts ([\w ]+?) --budget (\d+)$", full_section, re.M)
    parts = [p for names, _ in commands for p in names.split()]
    assert sorted(parts) == sorted(gpu_check.PARTS)
    budgets = [int(b) for _, b in commands]
    assert budgets == [sum(gpu_check.BUDGETS[p] for p in names.split()) for names, _ in commands]
    minutes = [math.ceil((b + start_up) / 60) for b in budgets]
    words = {2: "Two", 3: "Three", 4: "Four"}[len(commands)]
    said = ", ".join(map(str, minutes[:-1])) + f" and\n{minutes[-1]} minutes"
    assert f"{words} commands that fit {said}".replace("\n", " ") in page.replace("\n", " ")
    assert f"budgets, {', '.join(map(str, budgets[:-1]))} and {budgets[-1]} s," in page.replace("\n", " ")

    quick_minutes = gpu_check.QUICK_CALL // 60
    assert f"one {quick_minutes}-minute job" in page
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    assert f"about {whole} minutes" in makefile and f"within {quick_minutes} minutes" in makefile
    assert re.search(rf"about {whole} minutes in all", gpu_check.__doc__.replace("\n", " "))
    assert f"one {quick_minutes}-minute job" in gpu_check.__doc__
