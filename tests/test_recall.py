"""scripts/recall.py (the long-range recall diagnostic): the rotated blocks and which of their tokens
can be copied, argument errors, and the whole script end to end on a tiny corpus, where its perplexity over
whole blocks must equal fairseq's own validation perplexity of the same checkpoint."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.experiments import recall

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "recall.py")
ENV = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], "OMP_NUM_THREADS": "1",
       "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}



def test_copyable_tokens_are_exactly_those_an_induction_step_predicts():
    """With distinct tokens in the first half A, a second-half token can be copied exactly when the token
    after the previous token's occurrence in A is this token; and every copy is at least N/4 back."""
    length = 32
    blocks, offsets = recall.rotated_blocks(np.arange(1000), length, np.random.default_rng(0))
    assert len(blocks) == 1000 // (length // 2) and {0, length // 4} <= set(offsets)  # both ends drawn
    for block, o in zip(blocks, offsets):
        a = list(block[:length // 2])
        assert a == list(range(a[0], a[0] + length // 2)) and sorted(block[length // 2:]) == a
        induction = [p for p in range(length // 2, length)
                     if a.index(block[p - 1]) + 1 < len(a) and a[a.index(block[p - 1]) + 1] == block[p]]
        assert recall.copyable(length, o) == induction
        assert all(p - a.index(block[p]) >= length // 4 for p in induction)


@pytest.mark.parametrize("args, message", [
    (["--rows", "softmax,performer"], "unknown row 'performer'"),
    (["--rows", "eva3"], "chunk size 3 must divide the window (64)"),
    (["--tokens-per-sample", "256"], "more than 4 windows long"),
    (["--tokens-per-sample", "600"], "must be a multiple of the window (64)"),
    (["--updates", "0"], "--updates and --validate-every must be positive"),
    (["--seeds", "1,two"], "--seeds must be comma-separated whole numbers, not '1,two'"),
    (["--seeds", "0"], "--seeds must be positive"),
])
def test_bad_arguments_are_refused_by_name(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        recall.parse_args(["data", "--work", str(tmp_path), *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_rows_differ_in_their_attention_only_and_exact_spans_the_block(tmp_path):
    args = recall.parse_args(["data", "--work", str(tmp_path), "--rows", "softmax,exact,local,eva4"])
    options = {row: [str(o) for o in recall.attention_options(args, row)] for row in args.rows}
    assert options["softmax"] == ["--decoder-attention", "softmax"]
    assert options["exact"][2:6] == ["--eva-window-size", "512", "--eva-chunk-size", "0"]
    assert options["local"][2:6] == ["--eva-window-size", "64", "--eva-chunk-size", "0"]
    assert options["eva4"][2:6] == ["--eva-window-size", "64", "--eva-chunk-size", "4"]


def test_a_second_training_seed_trains_on_the_same_blocks_in_its_own_folder(tmp_path):
    args = recall.parse_args(["data", "--work", str(tmp_path), "--seed", "3", "--seeds", "1,2"])
    assert args.seed == 3 and args.seeds == [1, 2]
    first, second = ([str(o) for o in recall.train_command(args, "bin", "eva4", seed)] for seed in args.seeds)
    assert first[first.index("--seed") + 1] == "1" and second[second.index("--seed") + 1] == "2"
    assert first[-1] == str(tmp_path / "eva4") and second[-1] == str(tmp_path / "eva4-seed2")
    i = first.index("--seed") + 1
    assert first[:i] + first[i + 1:-1] == second[:i] + second[i + 1:-1]  # nothing else differs


def test_report_orders_every_finished_run(tmp_path):
    for run in ("eva16", "local", "eva4-seed2", "eva4", "exact-seed2", "exact", "softmax", "eva8", "eva4-seed10"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "recall.json").write_text("{}")
    (tmp_path / "eva2").mkdir()  # not evaluated: left out
    assert recall.finished_rows(str(tmp_path)) == ["softmax", "exact", "exact-seed2", "local", "eva4", "eva4-seed2",
                                                   "eva4-seed10", "eva8", "eva16"]
    args = recall.parse_args(["data", "--work", str(tmp_path)])
    assert recall.describe(args, "exact") == "exact (all earlier tokens, relative position bias)"
    assert recall.describe(args, "eva4-seed2") == "EVA (window 64, chunks of 4: 112 at the end), seed 2"
    repeated = {"softmax": 60.0, "exact": 1.0, "exact-seed2": 2.0, "local": 50.0, "eva4": 50.0 ** 0.5}
    for run in recall.finished_rows(str(tmp_path)):
        (tmp_path / run / "recall.json").write_text(json.dumps({"first half": 55.0, "repeated": repeated.get(run, 50.0)}))
        (tmp_path / run / "curve.jsonl").write_text(json.dumps({"cpu_s": 40.0, "updates": 100, "ppl": 70.0}) + "\n")
        (tmp_path / run / "command.txt").write_text("_train ...\n")
    recall.report(args)
    table = {line.split(" | ")[0][2:]: line.split(" | ") for line in (tmp_path / "results.md").read_text().splitlines()
             if line.startswith("| ") and line[2:].split(" ")[0] in ("softmax", "exact", "local", "EVA")}
    assert len(table) == 9 and all(len(cells) == 9 for cells in table.values())
    share = {row: cells[7] for row, cells in table.items()}
    assert share["exact (all earlier tokens, relative position bias)"] == "100%"
    assert share["local (window 64)"] == "0%" and share["softmax (all earlier tokens)"] == "-5%"
    assert share["EVA (window 64, chunks of 4: 112 at the end)"] == "50%"
    assert share["exact (all earlier tokens, relative position bias), seed 2"] == "82%"  # log(50/2) / log(50)


def test_share_of_exact_recall_is_in_log_perplexity_against_local():
    assert recall.recall_share(53.30, 53.30, 1.08) == 0
    assert recall.recall_share(1.08, 53.30, 1.08) == pytest.approx(1)
    assert recall.recall_share(53.30 ** 0.5, 53.30, 1) == pytest.approx(0.5)  # half the nats saved
    assert recall.recall_share(3.0, 53.30, None) is None and recall.recall_share(3.0, 5.0, 5.0) is None


def test_data_without_a_dictionary_is_named(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, tmp_path, "--work", tmp_path / "w"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 1 and f"{tmp_path} has no dict.txt" in r.stderr and not (tmp_path / "w").exists()


@pytest.mark.slow
def test_whole_script_on_a_tiny_corpus_then_resumes_without_work(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, lines in (("train", 600), ("valid", 150), ("test", 150)):
        text = open(os.path.join(ROOT, "data", "sample", "doc_en", f"{split}.txt")).readlines()[:lines]
        (raw / f"{split}.txt").write_text("".join(text))
    data = tmp_path / "bin"
    subprocess.run(["fairseq-preprocess", "--only-source", "--trainpref", raw / "train.txt", "--validpref", raw / "valid.txt",
                    "--testpref", raw / "test.txt", "--nwordssrc", "300", "--destdir", data, "--workers", "1"],
                   env=ENV, check=True, capture_output=True)
    work = tmp_path / "work"
    args = [SCRIPT, data, "--work", work, "--rows", "softmax,local,eva4", "--updates", "8", "--validate-every", "4",
            "--tokens-per-sample", "64", "--window", "8", "--layers", "1", "--dim", "32", "--ffn", "64", "--heads", "2",
            "--blocks-per-batch", "2", "--valid-blocks", "6", "--test-blocks", "4"]
    r = subprocess.run([sys.executable, *args], env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(json.load(open(work / "bin" / "test.offsets.json"))) == 4
    for row in ("softmax", "local", "eva4"):
        curve = [json.loads(x) for x in open(work / row / "curve.jsonl")]
        assert curve[-1]["updates"] == 8
        ppl = json.load(open(work / row / "recall.json"))
        assert ppl["blocks"] == 4 and all(1 < ppl[k] < 2000 for k in ("all", "first half", "repeated"))
        # the same checkpoint on the valid blocks, all positions: fairseq's valid perplexity (loss rounded to 3 decimals)
        mine = recall.recall_perplexity(str(work / row / "checkpoint_last.pt"), str(work / "bin"), "valid", 6)
        assert mine["all"] == pytest.approx(curve[-1]["ppl"], rel=1e-3), row
        assert ("without chunks" in ppl) == (row == "eva4")
    eva = json.load(open(work / "eva4" / "recall.json"))
    cut = eva["without chunks"]
    assert cut["blocks"] == 4 and cut["first half"] != eva["first half"]  # queries after the first window lose their chunks
    text = (work / "results.md").read_text()
    assert "| EVA (window 8, chunks of 4: 14 at the end) | 8 |" in text and "| local (window 8) | 8 |" in text
    before = (work / "eva4" / "train.log").stat().st_mtime
    r = subprocess.run([sys.executable, *args], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "training" not in r.stdout and (work / "eva4" / "train.log").stat().st_mtime == before
