"""End to end, through fairseq's command-line tools: causal EVA language model (English prose subset of
the bundled sample). fairseq-train (loss goes down), fairseq-eval-lm with and without a context window,
generation by incremental decoding equal to a full forward, fairseq-hydra-train, option errors."""

import json
import re

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq import checkpoint_utils  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the models, for loading a checkpoint in this process)
from fairseq_helpers import FIXTURES, USER_DIR, is_finite, json_records, lm_data, run  # noqa: E402

UPDATES = 16
TRAIN = [
    "--user-dir", USER_DIR, "--cpu", "--task", "language_modeling", "--arch", "transformer_lm_eva_tiny",
    "--tokens-per-sample", "64", "--sample-break-mode", "none", "--share-decoder-input-output-embed",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "8", "--criterion", "cross_entropy", "--max-tokens", "1024",
    "--log-format", "json", "--log-interval", "1", "--seed", "1", "--no-epoch-checkpoints",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data = lm_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("lm_ckpt")
    proc = run("fairseq-train", data["bin"], *TRAIN, "--save-dir", save, "--max-update", UPDATES, cwd=save)
    return {**data, "save": save, "log": proc.log}


def test_training_lowers_the_loss(trained):
    records = json_records(trained["log"], "train_inner")
    assert [r["num_updates"] for r in records] == list(range(1, UPDATES + 1))
    losses = [r["loss"] for r in records]
    assert all(is_finite(x) for x in losses)
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.5, losses
    assert "EVAMultiheadAttention" in trained["log"]
    assert (trained["save"] / "checkpoint_last.pt").exists()


@pytest.mark.parametrize("context_window", [0, 32])
def test_eval_lm_gives_a_finite_perplexity(trained, context_window):
    proc = run("fairseq-eval-lm", trained["bin"], "--user-dir", USER_DIR, "--cpu",
               "--path", trained["save"] / "checkpoint_last.pt", "--tokens-per-sample", 64,
               "--context-window", context_window, "--max-tokens", 4096, "--gen-subset", "test")
    match = re.search(r"Loss \(base 2\): (\S+), Perplexity: (\S+)", proc.log)
    assert match, proc.log[-2000:]
    loss, ppl = float(match.group(1).rstrip(",")), float(match.group(2))
    assert is_finite(loss) and is_finite(ppl) and 1.0 < ppl < 1000.0  # 1000 pieces: uniform would be 1000


@pytest.mark.parametrize("context_window", [64, 100])
def test_eval_lm_refuses_a_context_window_as_long_as_the_block(trained, context_window):
    """fairseq failed inside its token blocks (ZeroDivisionError at 64 = --tokens-per-sample, negative dimensions
    above): one line naming both options, before the data and the model are loaded."""
    proc = run("fairseq-eval-lm", trained["bin"], "--user-dir", USER_DIR, "--cpu",
               "--path", trained["save"] / "checkpoint_last.pt", "--tokens-per-sample", 64,
               "--context-window", context_window, "--max-tokens", 4096, "--gen-subset", "test", check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        f"fairseq-eval-lm: error: --context-window {context_window} must be smaller than --tokens-per-sample 64: "
        f"each block of 64 tokens scores the tokens after its first {context_window} (e.g. --context-window 32 "
        "with --tokens-per-sample 64)"), proc.log[-2000:]
    assert "Traceback" not in proc.log and "loading model" not in proc.log


GENERATE = """
import copy, json, sys
import torch
from omegaconf import open_dict
from fairseq.models.transformer_lm import TransformerLanguageModel
save, data, user_dir = sys.argv[1:]
lm = TransformerLanguageModel.from_pretrained(save, "checkpoint_last.pt", data_name_or_path=data, user_dir=user_dir)
lm.eval()
from fairseq_eva.modules import EVAMultiheadAttention
steps = []  # one entry per EVA call with an incremental state: (tokens fed, cached tensors)
forward = EVAMultiheadAttention.forward
def counting_forward(self, query, *args, incremental_state=None, **kwargs):
    out = forward(self, query, *args, incremental_state=incremental_state, **kwargs)
    if incremental_state is not None:
        steps.append((query.size(0), len(self._get_input_buffer(incremental_state))))
    return out
EVAMultiheadAttention.forward = counting_forward
model, d = lm.models[0], lm.task.dictionary
result = {"cls": type(model).__name__, "attn": type(model.decoder.layers[0].self_attn).__name__}
prompt = lm.encode("▁The ▁file ▁is")[:-1]  # without the eos that encode() appends
for beam in (1, 4):
    gen = copy.deepcopy(lm.cfg.generation)
    with open_dict(gen):
        gen.beam, gen.min_len, gen.max_len_b = beam, 40, 40  # 40 tokens: several windows and chunks
    generator = lm.task.build_generator(lm.models, gen)
    src = torch.cat([torch.tensor([d.eos()]), prompt]).unsqueeze(0)
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)])}}
    steps.clear()
    hypo = lm.task.inference_step(generator, lm.models, sample)[0][0]  # incremental decoding
    with torch.no_grad():  # one full forward over the same sequence
        net_input = torch.cat([torch.tensor([d.eos()]), hypo["tokens"][:-1]]).unsqueeze(0)
        lprobs = model.get_normalized_probs(model(net_input), log_probs=True)[0]
    full = lprobs.gather(-1, hypo["tokens"].unsqueeze(-1)).squeeze(-1)
    result[f"beam{beam}"] = {
        "incremental_steps": len(steps), "tokens_per_step": sorted({n for n, _ in steps}),
        "cache_used": all(c > 0 for _, c in steps),
        "length": len(hypo["tokens"]),
        "prefix_kept": hypo["tokens"][: len(prompt)].tolist() == prompt.tolist(),
        "max_diff": (full - hypo["positional_scores"]).abs().max().item(),
    }
print(json.dumps(result))
"""


def test_generation_by_incremental_decoding_scores_like_a_full_forward(trained, tmp_path):
    script = tmp_path / "generate.py"
    script.write_text(GENERATE)
    proc = run("python", script, trained["save"], trained["bin"], USER_DIR)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cls"] == "TransformerLanguageModelEVA" and result["attn"] == "EVAMultiheadAttention"
    for beam in ("beam1", "beam4"):
        assert result[beam]["length"] == 41 and result[beam]["prefix_kept"]
        # every EVA call went through fairseq's incremental state, one token at a time, with a cache
        assert result[beam]["incremental_steps"] == 41 * 2  # 41 steps x 2 layers
        assert result[beam]["tokens_per_step"] == [1] and result[beam]["cache_used"]
        assert result[beam]["max_diff"] < 1e-4, result


def test_hydra_train_runs_a_tiny_config(trained, tmp_path):
    proc = run("fairseq-hydra-train", "--config-dir", FIXTURES / "hydra", "--config-name", "tiny_lm_eva",
               f"task.data={trained['bin']}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
               f"hydra.run.dir={tmp_path}", "+model.eva_rpe_num_buckets=16", cwd=tmp_path)  # the demo's `+` form
    records = json_records(proc.log, "train_inner")
    assert [r["num_updates"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all(is_finite(r["loss"]) for r in records)
    assert "EVAMultiheadAttention" in proc.log
    # its checkpoint (configuration saved as a dict, not a Namespace) loads and builds the EVA model
    models, _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "ckpt" / "checkpoint_last.pt")],
                                                     arg_overrides={"data": str(trained["bin"])})
    attn = models[0].decoder.layers[0].self_attn
    assert type(attn).__name__ == "EVAMultiheadAttention"
    assert (attn.causal, attn.window_size, attn.overlap, attn.chunk_size) == (True, 8, True, 2)  # the config's
    assert attn.rpe.num_buckets == 16  # the `+model.` key's


@pytest.mark.slow
def test_a_misspelled_model_key_stops_hydra_train_with_one_line(trained, tmp_path):
    """From the command line (the `+` form) and from a YAML config; fairseq-train's argparse refuses it too."""
    expected = "model.eva_windw_size is not an option of transformer_lm_eva_tiny (did you mean model.eva_window_size?)"
    fixture = (FIXTURES / "hydra" / "tiny_lm_eva.yaml").read_text()
    assert "\n  eva_window_size: 8\n" in fixture
    (tmp_path / "typo.yaml").write_text(fixture.replace("\n  eva_window_size: 8\n", "\n  eva_windw_size: 8\n"))
    for config_dir, name, extra in ((FIXTURES / "hydra", "tiny_lm_eva", ["+model.eva_windw_size=8"]),
                                    (tmp_path, "typo", [])):
        save = tmp_path / f"ckpt_{name}"
        proc = run("fairseq-hydra-train", "--config-dir", config_dir, "--config-name", name, f"task.data={trained['bin']}",
                   f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={save}", f"hydra.run.dir={save}", *extra,
                   cwd=tmp_path, check=False)
        assert proc.returncode != 0
        assert expected in proc.stderr.splitlines(), proc.log[-3000:]
        assert "Traceback" not in proc.log and "train_inner" not in proc.log and not list(save.glob("*.pt"))
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", tmp_path / "ckpt", "--eva-windw-size", 8,
               cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "unrecognized arguments: --eva-windw-size 8" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton kernel runs on a CUDA machine")
def test_a_pinned_kernel_that_cannot_run_here_stops_before_training(trained, tmp_path):
    """--eva-kernel triton without CUDA (and without Triton's interpreter): one line naming the option and the
    kernels that can run, when the model is built; no traceback, no checkpoint, no crash.pt, no empty save dir."""
    save = tmp_path / "ckpt"
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", save, "--max-update", 2, "--eva-kernel", "triton",
               cwd=tmp_path, check=False, env={"TRITON_INTERPRET": "0"})
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("fairseq-train: error: --eva-kernel triton")]
    assert said and "cannot run on this machine (it runs on cuda, not cpu): use one of auto, " in said[0], proc.log[-3000:]
    assert "Traceback" not in proc.log and "train_inner" not in proc.log and not save.exists()


def test_a_pinned_c_loop_without_a_compiler_stops_before_training(trained, tmp_path):
    """--eva-kernel c_loop where no C compiler is found (and nothing cached): one line naming the option, why,
    and the kernels that can run; no warning that another kernel runs instead, no traceback, no save dir."""
    save = tmp_path / "ckpt"
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", save, "--max-update", 2, "--eva-kernel", "c_loop",
               cwd=tmp_path, check=False, env={"CC": "/nonexistent/cc", "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("fairseq-train: error: --eva-kernel c_loop")]
    assert said and "cannot run on this machine (no C compiler: '/nonexistent/cc'" in said[0], proc.log[-3000:]
    assert "use one of auto, blockwise" in said[0] and "instead" not in proc.log
    assert "Traceback" not in proc.log and "train_inner" not in proc.log and not save.exists()


@pytest.mark.slow
def test_a_pinned_kernel_that_cannot_train_stops_before_the_first_batch(trained, tmp_path):
    """--eva-kernel fused on the CPU evaluates but gives the trainable relative position bias no gradient: training
    with it ends in one line naming the option, why and the kernels that train; no traceback, no crash.pt."""
    save = tmp_path / "ckpt"
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", save, "--max-update", 2, "--eva-kernel", "fused",
               cwd=tmp_path, check=False)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("fairseq-train: error: --eva-kernel fused")]
    assert said and "gives no gradient to a trainable relative position bias): train with one of auto, " in said[0], \
        proc.log[-3000:]
    assert "Traceback" not in proc.log and "train_inner" not in proc.log and not save.exists()


def test_bad_option_stops_before_training(trained, tmp_path):
    proc = run("fairseq-train", trained["bin"], *TRAIN, "--save-dir", tmp_path, "--max-update", 2,
               "--eva-window-size", 16, "--eva-chunk-size", 5, cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "--eva-chunk-size (5) must divide --eva-window-size (16)" in proc.log
    assert "train_inner" not in proc.log and not list(tmp_path.glob("*.pt"))


def test_ctrl_c_ends_with_the_checkpoint_to_resume_from(trained, tmp_path):
    """SIGINT to fairseq-train's process group (what Ctrl-C sends) after a checkpoint was saved: exit 130 and one line
    naming checkpoint_last.pt, the update it holds, and that the same command resumes; no traceback."""
    import time

    from fairseq_helpers import BIN, press_ctrl_c, start_as_in_a_terminal

    save = tmp_path / "ckpt"
    proc = start_as_in_a_terminal([BIN / "fairseq-train", trained["bin"], *TRAIN, "--save-dir", save, "--max-update",
                                   "100000", "--save-interval-updates", "2"], cwd=tmp_path)
    deadline = time.monotonic() + 300
    while not (save / "checkpoint_last.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    out, err = press_ctrl_c(proc)
    said = [line for line in err.splitlines() if "interrupted at update" in line]
    assert proc.returncode == 130, (out + err)[-3000:]
    assert len(said) == 1 and f"{save}/checkpoint_last.pt holds update " in said[0], err[-3000:]
    assert said[0].endswith("the same command resumes from it") and "Traceback" not in out + err
