"""A checkpoint records its attention: fairseq-train refuses to resume, restore or fine-tune it into a model of
another mechanism or other options, or of the same attention and other sizes, in one line naming both, before any
update and leaving no file; an evaluation's --model-overrides that change the attention are refused; fairseq-eval-lm
builds the model a checkpoint was trained as, even after a default changed in the code; a checkpoint from before
the record loads as it did (its missing options at their defaults); fairseq-train --help with an --arch lists the
model's attention options. All jobs run in one process."""

import pytest

pytest.importorskip("fairseq")

import torch  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401 (checkpoints load weights-only with its safe globals)
from fairseq_helpers import USER_DIR, json_records, last_line, lm_data, run_jobs  # noqa: E402

T2R_DEFAULT_CHANGED = """
import dataclasses, sys
from fairseq_cli import eval_lm
from fairseq_eva.attention import registry
t2r = registry.get("t2r")
registry.MECHANISMS["t2r"] = dataclasses.replace(t2r, options=tuple(
    dataclasses.replace(o, default=8) if o.name == "num_features" else o for o in t2r.options))
try:
    sys.argv = ["fairseq-eval-lm", *ARGS]
    eval_lm.cli_main()
finally:
    registry.MECHANISMS["t2r"] = t2r
"""

WITHOUT_RECORD = """
import sys, torch, fairseq_eva
from fairseq_cli import eval_lm
state = torch.load(CHECKPOINT)
del vars(state["cfg"]["model"])["t2r_num_features"]  # as fairseq-train saved it before the record
torch.save(state, OLD)
sys.argv = ["fairseq-eval-lm", *ARGS]
eval_lm.cli_main()
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = lm_data(tmp_path_factory)["bin"]
    save = tmp_path_factory.mktemp("attention_record")
    train = ("train", data, "--user-dir", USER_DIR, "--cpu", "--task", "language_modeling", "--arch",
             "transformer_lm_eva_tiny", "--tokens-per-sample", 64, "--max-tokens", 512, "--optimizer", "adam",
             "--lr", "1e-3", "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", 1)
    performer = ("--decoder-attention", "performer", "--performer-num-features")
    eval_lm = [str(data), "--user-dir", USER_DIR, "--cpu", "--tokens-per-sample", "64", "--gen-subset", "valid"]
    t2r = save / "t2r" / "checkpoint_last.pt"
    jobs = {
        "elu": (*train, "--max-update", 2, "--decoder-attention", "elu", "--save-dir", save / "elu"),
        "resumed_as_softmax": (*train, "--max-update", 4, "--decoder-attention", "softmax", "--save-dir", save / "elu"),
        "performer": (*train, "--max-update", 2, *performer, 16, "--save-dir", save / "performer"),
        "resumed_with_8": (*train, "--max-update", 4, *performer, 8, "--save-dir", save / "performer"),
        "restored_at_default": (*train, "--max-update", 4, "--decoder-attention", "performer", "--save-dir",
                                save / "restored", "--restore-file", save / "performer" / "checkpoint_last.pt"),
        "finetuned_as_elu": (*train, "--max-update", 4, "--decoder-attention", "elu", "--save-dir", save / "finetuned",
                             "--finetune-from-model", save / "performer" / "checkpoint_last.pt"),
        "resumed_as_another_arch": (*train, "--max-update", 4, *performer, 16, "--save-dir", save / "performer",
                                    "--arch", "transformer_lm_eva"),
        "resumed_with_other_sizes": (*train, "--max-update", 4, *performer, 16, "--save-dir", save / "performer",
                                     "--decoder-embed-dim", 32),
        "evaluated_with_8": ("eval_lm", *eval_lm, "--path", save / "performer" / "checkpoint_last.pt",
                             "--model-overrides", "{'performer_num_features': 8}"),
        "evaluated_as_softmax": ("eval_lm", *eval_lm, "--path", save / "elu" / "checkpoint_last.pt",
                                 "--model-overrides", "{'decoder_attention': 'softmax'}"),
        "evaluated_with_a_kernel": ("eval_lm", *eval_lm, "--path", save / "performer" / "checkpoint_last.pt",
                                    "--model-overrides", "{'eva_kernel': 'auto', 'dropout': 0.2}"),
        "t2r": (*train, "--max-update", 2, "--decoder-attention", "t2r", "--save-dir", save / "t2r"),
        "without_record": {"code": WITHOUT_RECORD.replace("CHECKPOINT", repr(str(t2r))).replace(
            "OLD", repr(str(save / "old.pt"))).replace("ARGS", repr([*eval_lm, "--path", str(save / "old.pt")]))},
        "default_changed": {"code": T2R_DEFAULT_CHANGED.replace("ARGS", repr([*eval_lm, "--path", str(t2r)]))},
        "help": ("train", "--help", "--user-dir", USER_DIR, "--arch", "transformer_eva_tiny"),
    }
    return {"save": save, **run_jobs(jobs, cwd=save)}


def updates(path):
    return torch.load(path)["optimizer_history"][-1]["num_updates"]


def test_resuming_with_another_mechanism_or_other_options_is_refused_before_any_update(runs):
    save = runs["save"]
    for job in ("elu", "performer", "t2r"):
        assert runs[job][0] == 0, runs[job][1][-3000:]
    fix = "give the checkpoint's options to resume it, or another --save-dir to train this model afresh"
    assert last_line(runs["resumed_as_softmax"]) == (
        f"fairseq-train: error: {save}/elu/checkpoint_last.pt holds a model trained with --decoder-attention elu, "
        f"and this run asks for --decoder-attention softmax: {fix}")
    assert last_line(runs["resumed_with_8"]) == (
        f"fairseq-train: error: {save}/performer/checkpoint_last.pt holds a model trained with "
        f"--performer-num-features 16, and this run asks for --performer-num-features 8: {fix}")
    for job in ("resumed_as_softmax", "resumed_with_8"):
        assert json_records(runs[job][1], "train_inner") == []
    assert updates(save / "elu" / "checkpoint_last.pt") == 2 and updates(save / "performer" / "checkpoint_last.pt") == 2
    assert not list(save.rglob("crash.pt"))


def test_resuming_into_another_architecture_or_other_sizes_names_them(runs):
    """The same attention in a model whose parameters do not fit: one line instead of fairseq's "Cannot load model
    parameters", before any update."""
    save = runs["save"]
    fix = "its parameters do not fit this model; give the checkpoint's options to resume it, or another --save-dir"
    assert last_line(runs["resumed_as_another_arch"]).startswith(
        f"fairseq-train: error: {save}/performer/checkpoint_last.pt holds a model trained with --arch "
        f"transformer_lm_eva_tiny, and this run asks for --arch transformer_lm_eva: {fix}")
    line = last_line(runs["resumed_with_other_sizes"])
    assert line.startswith(f"fairseq-train: error: {save}/performer/checkpoint_last.pt holds a model trained with "
                           "--decoder-embed-dim 64") and "and this run asks for --decoder-embed-dim 32" in line, line
    for job in ("resumed_as_another_arch", "resumed_with_other_sizes"):
        assert json_records(runs[job][1], "train_inner") == [] and "Cannot load" not in runs[job][1]
    assert updates(save / "performer" / "checkpoint_last.pt") == 2


def test_model_overrides_that_change_the_attention_are_refused(runs):
    save = runs["save"]
    assert last_line(runs["evaluated_with_8"]) == (
        f"fairseq-eval-lm: error: {save}/performer/checkpoint_last.pt holds a model trained with --performer-num-features "
        "16, and --model-overrides {'performer_num_features': 8} asks for --performer-num-features 8: its parameters "
        "are those of the attention it was trained with; leave the attention's options out of --model-overrides "
        "(eva_kernel and eva_compile may be given)")
    assert last_line(runs["evaluated_as_softmax"]).startswith(  # no parameters to mismatch: it evaluated as softmax
        f"fairseq-eval-lm: error: {save}/elu/checkpoint_last.pt holds a model trained with --decoder-attention elu, "
        "and --model-overrides {'decoder_attention': 'softmax'} asks for --decoder-attention softmax: ")
    status, log = runs["evaluated_with_a_kernel"]  # what is not recorded, and what lies outside the attention
    assert status == 0 and "Perplexity" in log, log[-3000:]


def test_restoring_or_fine_tuning_another_model_is_refused_and_leaves_no_save_dir(runs):
    save = runs["save"]
    checkpoint = save / "performer" / "checkpoint_last.pt"
    assert last_line(runs["restored_at_default"]) == (
        f"fairseq-train: error: {checkpoint} holds a model trained with --performer-num-features 16, and this run "
        "asks for --performer-num-features 256: give the checkpoint's options to load it, or another checkpoint")
    assert last_line(runs["finetuned_as_elu"]) == (
        f"fairseq-train: error: {checkpoint} holds a model trained with --decoder-attention performer, and this run "
        "asks for --decoder-attention elu: give the checkpoint's options to load it, or another checkpoint")
    assert not (save / "restored").exists() and not (save / "finetuned").exists()


def test_a_checkpoint_records_every_option_and_loads_as_trained_after_a_default_changed(runs):
    model = torch.load(runs["save"] / "t2r" / "checkpoint_last.pt")["cfg"]["model"]
    assert model.decoder_attention == "t2r" and model.t2r_num_features == 32  # not given: the default, recorded
    assert not hasattr(model, "performer_num_features")  # another mechanism's options are not the model's
    status, log = runs["default_changed"]
    assert status == 0 and "Perplexity" in log, log[-3000:]


def test_a_checkpoint_from_before_the_record_loads_with_the_defaults(runs):
    status, log = runs["without_record"]
    assert status == 0 and "Perplexity" in log, log[-3000:]


def test_help_with_an_arch_lists_the_models_attention_options(runs):
    status, log = runs["help"]
    assert status == 0 and "usage: fairseq-train" in log, log[-3000:]
    text = " ".join(log.split())
    for option in ("--encoder-attention", "--eva-window-size INT EVA: size w of the local blocks",
                   "--performer-num-features INT performer attention: number m of random features",
                   "--lara-num-landmarks", "--reformer-chunk-size"):
        assert option in text, option

