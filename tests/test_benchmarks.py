"""Each benchmark runs once at a tiny size, so that it cannot rot: its JSON has the expected fields and its
plot exists. No timing is asserted (the benchmarks measure, docs/results.md reports)."""

import json
import math

import pytest
import torch

from benchmarks import approximation, baselines, decoding, op_count, speed, training


def run(module, tmp_path, *argv):
    out_json, out_png = tmp_path / "result.json", tmp_path / "plot.png"
    module.main([*argv, "--threads", "1", "--malloc", "default", "--json", str(out_json), "--plot", str(out_png)])
    data = json.loads(out_json.read_text())
    assert out_png.stat().st_size > 1000
    assert {"benchmark", "command", "machine", "settings", "results"} <= set(data)
    assert data["machine"]["torch"] == torch.__version__
    return data


def test_speed(tmp_path):
    data = run(speed, tmp_path, "--lengths", "64", "96", "--repeats", "1", "--min-time", "0", "--device", "cpu")
    mechanisms = set(baselines.MECHANISMS) | {"projections"}
    assert {(r["N"], r["mechanism"]) for r in data["results"]} == {(N, m) for N in (64, 96) for m in mechanisms}
    for r in data["results"]:
        assert r["layer_s"] > 0 and r["peak_bytes"] > 0
        assert (r["mechanism"] == "projections") != ("attention_s" in r)
    pairs = {(s["N"], s["mechanism"], s["baseline"]) for s in data["speedups"]}
    assert (64, "eva", "sdpa") in pairs and (96, "eva-causal", "sdpa-causal") in pairs
    assert (64, "eva+rpe+dropout", "eva") in pairs and (96, "eva-causal+rpe+dropout", "eva-causal") in pairs
    assert all(s["layer_speedup"] > 0 and s["memory_ratio"] > 0 for s in data["speedups"])


def test_speedups_pair_the_samples_of_each_round():
    """A slow spell that hits one round of the interleaving moves neither candidate's ratio in that round;
    the ratio of the medians would take the baseline's fast round against the mechanism's slow one."""
    base = {"layer_s": 1.0, "layer_samples": [1.0, 2.0, 1.0]}
    mech = {"layer_s": 2.2, "layer_samples": [1.1, 2.2, 2.5]}
    assert speed.speedup(mech, base, "layer") == pytest.approx(1 / 1.1)
    assert speed.speedup({"layer_s": 2.0}, base, "layer") == 0.5  # no samples: the ratio of the medians


def test_approximation(tmp_path):
    data = run(approximation, tmp_path, "--length", "64", "--windows", "8", "16", "64", "--chunks", "0", "4",
               "--causal-windows", "8",
               "--chunk-sizes", "0", "2", "--costs", "16,8", "--causal-costs", "8,2", "--seeds", "1", "--random-draws", "1",
               "--lm-steps", "2", "--lm-cache", str(tmp_path / "lm"))
    assert set(data["results"]) == {"random", "model"}
    for name, result in data["results"].items():
        rows = result["rows"]
        assert {(r["window"], r["chunks"]) for r in rows if r["mechanism"] == "eva" and not r["causal"]} == {
            (8, 0), (8, 4), (16, 0), (16, 4), (64, 0), (64, 4), (0, 4)}
        assert {(r["window"], r["chunk_size"]) for r in rows if r["causal"]} == {(8, 0), (8, 2)}
        assert all(math.isfinite(r["error"]) and r["error"] >= 0 for r in rows + result["equal_cost"])
        same = {(r["causal"], r["mechanism"]): r for r in result["equal_cost"]}
        assert set(same) == {(False, m) for m in ("eva", *approximation.EQUAL_COST)} | {
            (True, m) for m in ("eva", "local", "performer", "performer-relu", "rfa", "elu")}
        for causal in (False, True):  # each knob brings the mechanism's cost to EVA's
            eva = same[causal, "eva"]["cost_d"]
            assert all(abs(same[causal, m]["cost_d"] - eva) <= 0.05 * eva for m in ("performer", "rfa"))
    # a window covering the whole sequence without chunks is exact softmax attention
    assert all(r["error"] < 1e-9 for r in data["results"]["random"]["rows"] if r.get("window") == 64 and r["chunks"] == 0)


def test_decoding(tmp_path):
    data = run(decoding, tmp_path, "--contexts", "8", "32", "--tokens", "4", "--window", "8", "--chunk-size", "2",
               "--embed-dim", "32", "--heads", "2")
    rows = {(r["context"], r["mechanism"]): r for r in data["results"]}
    assert set(rows) == {(c, m) for c in (8, 32) for m in ("eva-causal", "softmax-kv-cat", "softmax-kv")}
    assert all(r["latency_mean_s"] > 0 and r["latency_median_s"] > 0 for r in rows.values())
    # softmax's cache grows with the context; EVA's only by its chunk summaries, the rest is one block's q, k, v
    assert rows[32, "softmax-kv"]["cache_bytes"] > 2.5 * rows[8, "softmax-kv"]["cache_bytes"]
    assert all(rows[c, "eva-causal"]["local_bytes"] <= 3 * 8 * 32 * 4 for c in (8, 32))
    assert rows[32, "eva-causal"]["chunk_summary_bytes"] > rows[8, "eva-causal"]["chunk_summary_bytes"]


def test_training(tmp_path):
    pytest.importorskip("fairseq")
    data = run(training, tmp_path, "--steps", "1", "--max-lines", "60", "--max-tokens", "256", "--lm-lengths", "32",
               "--vocab", "200")
    rows = {(r["setting"], r["attention"]): r for r in data["results"]}
    assert set(rows) == {(s, a) for s in ("translation", "lm-32") for a in ("eva", "softmax")}
    assert all(r["tokens_per_s"] > 0 and r["tokens_per_step"] > 0 for r in rows.values())


def test_op_counter_counts_operations_and_new_tensors():
    """Every aten call is an operation; a view is not a new tensor."""
    x = torch.randn(4, 6)
    with op_count.OpCounter() as counter:
        y = (x + 1).view(24)
        y.mul_(2)
    assert counter.ops == {"add": 1, "view": 1, "mul_": 1}
    assert counter.new == 1  # add's output; view and the in-place mul_ return an alias


def test_op_count(capsys):
    """The table has every EVA layer of the GPU check and the projections; EVA dispatches more than its
    projections."""
    assert op_count.main(["--kernel", "blockwise", "--length", "64"]) == 0
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and "---" not in line and "operations" not in line}
    assert set(rows) == {"eva", "eva+rpe+dropout", "eva-causal", "eva-causal+rpe+dropout", "projections"}
    assert all(int(rows[name][1]) > int(rows["projections"][1]) for name in rows if name != "projections")


@pytest.mark.slow
def test_busy_machine(tmp_path):
    """Eight short fairseq-train runs (about a minute): every (setting, machine state) pair has its row."""
    from benchmarks import busy_machine

    busy_machine.main(["--updates", "2", "--repeats", "1", "--neighbour-seconds", "2", "--out", str(tmp_path)])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert {"command", "commit", "date", "device"} <= set(meta)
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert len(rows) == 8 and all(row["median_s"] > 0 for row in rows)
    assert [r["ratio_to_default_alone"] for r in rows if r["setting"] == "default" and r["machine"] == "alone"] == [1.0]
    assert all(("neighbour_rate_ratio" in r) == (r["machine"] != "alone") for r in rows)
