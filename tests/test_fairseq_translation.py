"""End to end, through fairseq's command-line tools: translation with EVA (en-de subset of the bundled
sample). fairseq-preprocess, fairseq-train (loss goes down, resume), fairseq-generate (beam 4, length
penalty 0.6, BLEU), fairseq-interactive, the hub interface, option errors before training, no harmless
warnings on stderr."""

import json
import re

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq_helpers import MT_SIZES, REPO, USER_DIR, is_finite, json_records, run, translation_data  # noqa: E402

CONFIGS = REPO / "configs"

UPDATES = 16

# A tiny model with EVA in the encoder and causal EVA in the decoder, so that beam search goes through
# EVA's incremental decoding too.
TRAIN = [
    "--user-dir", USER_DIR, "--cpu", "--task", "translation", "-s", "en", "-t", "de",
    "--arch", "transformer_eva_tiny", "--decoder-attention", "eva", "--share-all-embeddings",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "8", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "1024", "--log-format", "json", "--log-interval", "1", "--seed", "1",
    "--no-epoch-checkpoints", "--save-interval-updates", "8", "--keep-interval-updates", "1",
    "--max-source-positions", "256", "--max-target-positions", "256", "--skip-invalid-size-inputs-valid-test",
    "--max-tokens-valid", "4096",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data = translation_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("mt_ckpt")
    proc = run("fairseq-train", data["bin"], *TRAIN, "--save-dir", save, "--max-update", UPDATES, cwd=save)
    return {**data, "save": save, "log": proc.log}


def test_training_lowers_the_loss(trained):
    records = json_records(trained["log"], "train_inner")
    assert [r["num_updates"] for r in records] == list(range(1, UPDATES + 1))
    losses = [r["loss"] for r in records]
    assert all(is_finite(x) for x in losses)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.5, losses
    assert "EVAMultiheadAttention" in trained["log"]  # the model really is EVA
    valid = json_records(trained["log"], "valid")
    assert valid and is_finite(valid[-1]["valid_loss"])
    assert (trained["save"] / "checkpoint_last.pt").exists()


def test_resume_continues_at_the_next_update(trained, tmp_path):
    save = tmp_path / "resumed"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes((trained["save"] / "checkpoint_last.pt").read_bytes())
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", save, "--max-update", UPDATES + 3, cwd=save)
    assert re.search(rf"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ {UPDATES} updates\)", proc.log)
    records = json_records(proc.log, "train_inner")
    assert [r["num_updates"] for r in records] == [UPDATES + 1, UPDATES + 2, UPDATES + 3]


def test_generate_with_beam_4_prints_hypotheses_and_bleu(trained):
    proc = run("fairseq-generate", trained["bin"], "--user-dir", USER_DIR, "--cpu", "-s", "en", "-t", "de",
               "--path", trained["save"] / "checkpoint_last.pt", "--beam", 4, "--lenpen", 0.6,
               "--remove-bpe", "sentencepiece", "--max-tokens", 4096, "--gen-subset", "test",
               "--required-batch-size-multiple", 1)  # else fairseq drops a last batch of under 8 sentences
    hypotheses = [line for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert sorted(int(h.split("\t")[0][2:]) for h in hypotheses) == list(range(MT_SIZES["test"]))
    assert all(re.match(r"H-\d+\t-?\d+(\.\d+)?", h) for h in hypotheses)
    bleu = re.search(r"Generate test with beam=4: BLEU4 = (\d+\.\d+), ", proc.log)
    assert bleu, proc.log[-2000:]
    assert 0.0 <= float(bleu.group(1)) <= 100.0


def test_interactive_translates_stdin(trained):
    sentences = "Open the file\nThe default plugin layout for the top panel.\n"
    proc = run("fairseq-interactive", trained["bin"], "--user-dir", USER_DIR, "--cpu", "-s", "en", "-t", "de",
               "--path", trained["save"] / "checkpoint_last.pt", "--beam", 4, "--lenpen", 0.6,
               "--bpe", "sentencepiece", "--sentencepiece-model", trained["spm"], input=sentences)
    hypotheses = re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", proc.stdout, flags=re.M)
    assert [int(i) for i, _, _ in hypotheses] == [0, 1]
    assert all(float(score) < 0 for _, score, _ in hypotheses)
    assert all("▁" not in text for _, _, text in hypotheses)  # sentencepiece was decoded


def test_ctrl_c_in_interactive_ends_with_one_line(trained):
    """fairseq-interactive waiting for input, then Ctrl-C (SIGINT to its process group, as a terminal sends it):
    killed by SIGINT (exit status 130) and the one line `fairseq-interactive: interrupted`, no traceback."""
    import signal
    import subprocess
    import time

    from fairseq_helpers import BIN, press_ctrl_c, start_as_in_a_terminal

    proc = start_as_in_a_terminal([BIN / "fairseq-interactive", trained["bin"], "--user-dir", USER_DIR, "--cpu", "-s",
                                   "en", "-t", "de", "--path", trained["save"] / "checkpoint_last.pt"],
                                  stdin=subprocess.PIPE)
    proc.stdin.write("Open the file\n")
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    line = ""
    while not line.startswith("H-0") and proc.poll() is None and time.monotonic() < deadline:
        line = proc.stdout.readline()  # the first sentence translated: the model is loaded, stdin is read next
    out, err = press_ctrl_c(proc)
    assert line.startswith("H-0"), err[-3000:]
    # Python ends on SIGINT as its default action does (a shell shows exit status 130)
    assert proc.returncode == -signal.SIGINT and "Traceback" not in out + err, err[-3000:]
    assert err.splitlines()[-1] == "fairseq-interactive: interrupted", err[-3000:]


HUB = """
import json, sys
from fairseq.models.transformer import TransformerModel  # fairseq's class: the plugin comes with user_dir
save, data, spm, user_dir = sys.argv[1:]
model = TransformerModel.from_pretrained(save, checkpoint_file="checkpoint_last.pt", data_name_or_path=data,
                                         bpe="sentencepiece", sentencepiece_model=spm, user_dir=user_dir,
                                         beam=4, lenpen=0.6)
model.eval()
short = "Open the file"
longer = ["The fill color of the highlight box is used when the pointer is over the plugin view layout.",
          "Select the default plugin layout for the top panel and the bottom panel of the desktop."]
alone = model.translate(short)
batch = model.translate([longer[0], short, longer[1]])
assert "fairseq_eva" in sys.modules  # imported by from_pretrained(user_dir=...), not by this script
print(json.dumps({"cls": type(model.models[0]).__name__, "alone": alone, "in_batch": batch[1]}))
"""


def test_hub_translates_and_a_sentence_does_not_depend_on_its_batch(trained, tmp_path):
    script = tmp_path / "hub.py"
    script.write_text(HUB)
    proc = run("python", script, trained["save"], trained["bin"], trained["spm"], USER_DIR)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cls"] == "TransformerEVAModel"
    assert isinstance(result["alone"], str) and result["alone"].strip()
    assert result["alone"] == result["in_batch"]


@pytest.mark.slow
def test_bad_option_stops_before_training_with_one_line(trained, tmp_path):
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", tmp_path, "--max-update", 2,
               "--eva-decoder-chunk-size", 3, cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[-1] == ("fairseq-train: error: --eva-decoder-chunk-size (3) must divide "
                                            "--eva-decoder-window-size (4) in causal EVA (EVA in the decoder self-attention)")
    assert "Traceback" not in proc.log
    assert "train_inner" not in proc.log and not list(tmp_path.glob("*.pt"))
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", tmp_path, "--max-update", 2,
               "--eva-overlap", "maybe", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "--eva-overlap" in proc.stderr and "expected true or false" in proc.stderr


def hydra_train(data, save, *overrides, env=None):
    """fairseq-hydra-train on the WMT14 EVA-32 config with the tiny architecture."""
    save.mkdir(exist_ok=True)
    return run("fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", "wmt14_en_de_eva32",
               f"common.user_dir={USER_DIR}", f"task.data={data}", f"checkpoint.save_dir={save}",
               "model._name=transformer_eva_tiny", "dataset.max_tokens=1024", "optimization.max_update=2", *overrides,
               cwd=save, check=False, env=env)


def test_bad_option_under_hydra_is_named_as_a_hydra_key(trained, tmp_path):
    proc = hydra_train(trained["bin"], tmp_path, "common.cpu=true", "common.fp16=false", "model.eva_window_size=5")
    assert proc.returncode != 0
    expected = "model.eva_overlap needs an even model.eva_window_size > 0, got 5 (EVA in the encoder self-attention)"
    assert expected in proc.stderr.splitlines()
    assert "Traceback" not in proc.log and "--eva" not in proc.log
    assert not list(tmp_path.glob("*.pt"))


# the warnings fairseq 0.12 prints with this torch and hydra (fairseq_eva/fairseq_fixes/harmless_warnings.py)
NOISE = ("Please install tensorboardX", "version_base", "is no longer experimental", "package header",
         "ConfigStore schema", "strict flag", "pin_memory", "torch.cuda.amp", "key_padding_mask",
         "change working directory")
# printed by fairseq-hydra-train before any plugin is loaded
BEFORE_THE_PLUGIN = ("Please install tensorboardX", "version_base", "ConfigStore schema")


@pytest.mark.slow
def test_training_prints_no_harmless_warnings(trained, tmp_path):
    """Warnings shown as a user sees them (Python's default filters); a softmax decoder, whose fairseq
    MultiheadAttention warns about its masks; a real error is still shown."""
    shown = {"PYTHONWARNINGS": ""}
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--decoder-attention", "softmax", "--save-dir", tmp_path / "a",
               "--max-update", 2, cwd=tmp_path, env=shown)
    assert [n for n in NOISE if n in proc.stderr] == [], proc.stderr
    assert "train_inner" in proc.log
    proc = hydra_train(trained["bin"], tmp_path / "b", "common.cpu=true", "common.fp16=false", env=shown)
    assert proc.returncode == 0, proc.log[-3000:]
    assert [n for n in NOISE if n in proc.stderr and n not in BEFORE_THE_PLUGIN] == [], proc.stderr
    proc = hydra_train(tmp_path / "no_such_data", tmp_path / "c", "common.cpu=true", "common.fp16=false", env=shown)
    assert proc.returncode != 0 and str(tmp_path / "no_such_data") in proc.stderr


FP16_ON_CPU = ("fp16 needs a CUDA GPU and torch sees none: on a CPU leave out --fp16 (fairseq-hydra-train: "
               "common.fp16=false; the training scripts do so with NGPUS=0)")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 is refused only without a CUDA GPU")
def test_fp16_on_a_cpu_stops_with_one_line(trained, tmp_path):
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", tmp_path, "--max-update", 2, "--fp16",
               cwd=tmp_path, check=False)
    assert proc.returncode != 0 and proc.stderr.splitlines()[-1] == f"fairseq-train: error: {FP16_ON_CPU}"
    assert "Traceback" not in proc.log and "train_inner" not in proc.log
    proc = hydra_train(trained["bin"], tmp_path)  # the config as it is: fp16 on
    assert proc.returncode != 0 and FP16_ON_CPU in proc.stderr.splitlines()
    assert "Traceback" not in proc.log and not list(tmp_path.glob("*.pt"))
