"""Every attention mechanism of the registry, end to end through fairseq's command-line tools, in one shared
fixture: each bidirectional one as the encoder self-attention of a tiny masked LM (fairseq-train), each causal
one as a tiny language model's (fairseq-train, then fairseq-eval-lm on its checkpoint) and as a translation
decoder's (fairseq-train, then fairseq-generate with beam search, which decodes incrementally and reorders the
cache). The tools' own entry points run one after another in one process (tests/fixtures/run_fairseq_tools.py),
so fairseq is imported once; a direction a mechanism lacks is refused by fairseq-train in one line.
The paper configs' real fairseq-hydra-train runs are in test_configs.py."""

import json
import re

import pytest

pytest.importorskip("fairseq")

from fairseq_eva.attention import registry  # noqa: E402
from fairseq_helpers import FIXTURES, REPO, USER_DIR, is_finite, json_records, lm_data, run, translation_data  # noqa: E402

# options that make each mechanism fit the tiny models (64 tokens, 4 heads of 16); [] keeps its defaults
TINY_OPTIONS = {
    "eva": None,  # tested on its own (test_fairseq_*.py)
    "softmax": None,  # fairseq's own MultiheadAttention
    "local": [],
    "performer": ["--performer-num-features", 16],
    "rfa": ["--rfa-num-features", 8],
    "elu": [],
    "t2r": ["--t2r-num-features", 8],
    "lara": ["--lara-num-landmarks", 8],
    "linformer": ["--linformer-projected-dim", 16, "--linformer-max-positions", 128],
    "reformer": ["--reformer-chunk-size", 8],
    "combiner": ["--combiner-span", 8],
    "long_short": ["--long-short-window-size", 8, "--long-short-num-landmarks", 4],
}
UPDATES = 4
COMMON = ["--user-dir", USER_DIR, "--cpu", "--optimizer", "adam", "--lr", "3e-3", "--log-format", "json",
          "--log-interval", "1", "--seed", "1", "--max-update", str(UPDATES), "--no-epoch-checkpoints",
          "--disable-validation"]


def _options(name):
    return [str(a) for a in TINY_OPTIONS[name]]


def _mlm(name, data, save):
    return (f"mlm-{name}", "train", [
        str(data), *COMMON, "--task", "masked_lm", "--criterion", "masked_lm", "--arch", "roberta_eva_tiny",
        "--tokens-per-sample", "64", "--sample-break-mode", "none", "--max-tokens", "1024",
        "--encoder-attention", name, *_options(name), "--save-dir", str(save / f"mlm-{name}")])


def _lm(name, data, save):
    return [(f"lm-{name}", "train", [
        str(data), *COMMON, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
        "--tokens-per-sample", "64", "--sample-break-mode", "none", "--max-tokens", "1024",
        "--decoder-attention", name, *_options(name), "--save-dir", str(save / f"lm-{name}")]),
        (f"eval-lm-{name}", "eval_lm", [
            str(data), "--user-dir", USER_DIR, "--cpu", "--path", str(save / f"lm-{name}" / "checkpoint_last.pt"),
            "--tokens-per-sample", "64", "--max-tokens", "2048", "--gen-subset", "valid"])]


def _mt(name, data, save):
    """Translation with the mechanism in the decoder (and in the encoder where it is bidirectional too), then
    beam search, which decodes incrementally and reorders the decoder's cache."""
    encoder = name if registry.BIDIRECTIONAL in registry.get(name).directions else "local"
    return [(f"mt-{name}", "train", [
        str(data), *COMMON, "--task", "translation", "--arch", "transformer_eva_tiny", "--encoder-attention",
        encoder, "--decoder-attention", name, *_options(name), "--share-all-embeddings", "--max-tokens", "1024",
        "--save-dir", str(save / f"mt-{name}")]),
        (f"generate-{name}", "generate", [
            str(data), "--user-dir", USER_DIR, "--cpu", "--path", str(save / f"mt-{name}" / "checkpoint_last.pt"),
            "--beam", "3", "--max-len-b", "10", "--batch-size", "8", "--gen-subset", "test"])]


def _refused(name, data, save):
    return (f"refused-{name}", "train", [
        str(data), *COMMON, "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
        "--tokens-per-sample", "64", "--max-tokens", "1024", "--decoder-attention", name,
        "--save-dir", str(save / f"refused-{name}")])


# option mistakes that only the fairseq layer can see: (job, arguments of a masked LM, the one line expected)
REFUSALS = [
    ("linformer-too-short", ["--encoder-attention", "linformer", "--linformer-max-positions", "32"],
     "fairseq-train: error: --linformer-max-positions (32) must be at least the model's longest input (64 positions): "
     "linformer attention has a column of its length projections a position; give --linformer-max-positions 64 or "
     "more, or --tokens-per-sample 32 or less"),
    ("performer-features", ["--encoder-attention", "performer", "--performer-num-features", "0"],
     "fairseq-train: error: --performer-num-features must be a positive integer, got 0"),
]


def mechanisms_to_test():
    return [n for n in registry.MECHANISMS if TINY_OPTIONS.get(n, ()) is not None]


def jobs(prose, mt, save):
    """(name, tool, args) of every run, in order (a checkpoint is written before a tool reads it): a causal
    mechanism in translation (both directions where it has both), a bidirectional-only one in a masked LM and
    refused as a decoder's self-attention."""
    out = []
    for name in mechanisms_to_test():
        if registry.CAUSAL in registry.get(name).directions:
            out += _mt(name, mt, save)
        else:
            out += [_mlm(name, prose, save), _refused(name, prose, save)]
    for job, args, _ in REFUSALS:
        out.append((job, "train", [str(prose), *COMMON, "--task", "masked_lm", "--criterion", "masked_lm", "--arch",
                                   "roberta_eva_tiny", "--tokens-per-sample", "64", "--max-tokens", "1024", *args,
                                   "--save-dir", str(save / job)]))
    return out


def run_jobs(todo, save):
    """{job name: (exit status, its output)}, all jobs in one process."""
    todo = [dict(name=n, tool=t, args=a) for n, t, a in todo]
    (save / "jobs.json").write_text(json.dumps(todo))
    proc = run("python", FIXTURES / "run_fairseq_tools.py", save / "jobs.json", check=False, timeout=900)
    out = {}
    for match in re.finditer(r"^=== job (\S+)\n(.*?)^=== end \1 status (\d+)", proc.log, re.S | re.M):
        out[match.group(1)] = (int(match.group(3)), match.group(2))
    missing = [job["name"] for job in todo if job["name"] not in out]
    assert not missing, f"jobs that did not finish: {missing}\n{proc.log[-4000:]}"
    return out


def check_trained(runs, job):
    status, log = runs[job]
    assert status == 0, log[-3000:]
    losses = [r["loss"] for r in json_records(log, "train_inner")]
    assert len(losses) == UPDATES and all(is_finite(x) for x in losses), log[-3000:]
    assert "MultiheadAttention" in log


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    prose, mt = lm_data(tmp_path_factory)["bin"], translation_data(tmp_path_factory)["bin"]
    save = tmp_path_factory.mktemp("mechanisms")
    return run_jobs(jobs(prose, mt, save), save)


def test_every_mechanism_has_tiny_options():
    assert sorted(TINY_OPTIONS) == sorted(registry.MECHANISMS)


@pytest.mark.parametrize("name", mechanisms_to_test())
def test_each_mechanism_trains_and_decodes_through_fairseq(runs, name):
    if registry.CAUSAL in registry.get(name).directions:
        check_trained(runs, f"mt-{name}")
        status, log = runs[f"generate-{name}"]
        hypotheses = re.findall(r"^H-\d+\t(\S+)\t", log, re.M)
        assert status == 0 and len(hypotheses) == 40 and all(is_finite(float(h)) for h in hypotheses), log[-3000:]
    else:
        check_trained(runs, f"mlm-{name}")
        status, log = runs[f"refused-{name}"]
        lines = [line for line in log.strip().splitlines() if line.strip()]
        assert status != 0 and "Traceback" not in log, log[-3000:]
        assert re.search(rf"--decoder-attention {name}: {name} attention is bidirectional only; causal choices: ",
                         lines[-1]), log[-3000:]


@pytest.mark.slow
def test_each_causal_mechanism_is_a_language_model_that_fairseq_eval_lm_scores(tmp_path_factory):
    prose = lm_data(tmp_path_factory)["bin"]
    save = tmp_path_factory.mktemp("mechanism_lms")
    causal = [n for n in mechanisms_to_test() if registry.CAUSAL in registry.get(n).directions]
    runs = run_jobs([job for name in causal for job in _lm(name, prose, save)], save)
    for name in causal:
        check_trained(runs, f"lm-{name}")
        status, log = runs[f"eval-lm-{name}"]
        ppl = re.search(r"Perplexity: (\S+)", log)
        assert status == 0 and ppl and is_finite(float(ppl.group(1))), log[-3000:]


def test_the_usage_page_lists_every_mechanism_as_the_registry_does():
    from fairseq_eva.modules.docs_tables import mechanism_table

    page = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    start, end = "tests/test_mechanisms_fairseq.py keeps it equal -->\n", "<!-- end of the table -->"
    shown = page[page.index(start) + len(start) : page.index(end)].strip()
    assert shown == mechanism_table(), (
        "docs/usage.md's table of mechanisms differs from the registry: paste the output of\n"
        "python -c 'from fairseq_eva.modules.docs_tables import mechanism_table; print(mechanism_table())'")


def test_the_usage_page_lists_the_attention_options_as_their_help_texts_say():
    from fairseq_eva.modules.docs_tables import eva_option_table

    page = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    start, end = "tests/test_mechanisms_fairseq.py keeps it equal -->\n", "<!-- end of the options table -->"
    shown = page[page.rindex(start) + len(start) : page.index(end)].strip()
    assert shown == eva_option_table(), (
        "docs/usage.md's table of the EVA options differs from their help texts: paste the output of\n"
        "python -c 'import fairseq_eva; from fairseq_eva.modules.docs_tables import eva_option_table; print(eva_option_table())'")


@pytest.mark.parametrize("job,line", [(job, line) for job, _, line in REFUSALS])
def test_a_bad_mechanism_option_ends_in_one_line_before_training(runs, job, line):
    status, log = runs[job]
    lines = [x for x in log.strip().splitlines() if x.strip()]
    assert status != 0 and "Traceback" not in log and lines[-1].startswith(line), log[-3000:]
