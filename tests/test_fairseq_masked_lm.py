"""End to end, through fairseq-train: the masked_lm task trains and validates a tiny roberta_eva; and
scripts/mlm_order.py reads the checkpoint as fairseq-validate does."""

import re

import pytest

pytest.importorskip("fairseq")

import torch  # noqa: E402
from fairseq import checkpoint_utils  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the models, for loading the checkpoint in this process)
from fairseq_helpers import REPO, USER_DIR, is_finite, json_records, lm_data, run  # noqa: E402

UPDATES = 12


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny roberta_eva trained for UPDATES updates: (data, save folder, fairseq-train's process)."""
    data = lm_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("mlm_ckpt")
    proc = run(
        "fairseq-train", data["bin"], "--user-dir", USER_DIR, "--cpu", "--task", "masked_lm",
        "--criterion", "masked_lm", "--arch", "roberta_eva_tiny", "--tokens-per-sample", 64,
        "--sample-break-mode", "none", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "3e-3",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 6, "--max-tokens", 2048, "--max-update", UPDATES,
        "--log-format", "json", "--log-interval", 1, "--seed", 1, "--save-dir", save, "--no-epoch-checkpoints",
        cwd=save,
    )
    return data, save, proc


def test_masked_lm_trains_and_validates_roberta_eva(trained):
    data, save, proc = trained
    assert "RobertaEVAModel" in proc.log and "EVAMultiheadAttention" in proc.log
    records = json_records(proc.log, "train_inner")
    assert [r["num_updates"] for r in records] == list(range(1, UPDATES + 1))
    losses = [r["loss"] for r in records]
    assert all(is_finite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses
    valid = json_records(proc.log, "valid")
    assert valid and is_finite(valid[-1]["valid_loss"]) and valid[-1]["valid_num_updates"] == UPDATES
    # the checkpoint loads (weights-only) and holds roberta_eva_tiny's bidirectional EVA
    models, _ = checkpoint_utils.load_model_ensemble([str(save / "checkpoint_last.pt")],
                                                     arg_overrides={"data": str(data["bin"])})
    attn = models[0].encoder.sentence_encoder.layers[0].self_attn
    assert type(attn).__name__ == "EVAMultiheadAttention"
    assert (attn.causal, attn.window_size, attn.overlap, attn.num_chunks) == (False, 16, False, 4)


def test_local_attention_with_a_per_place_table_trains_and_reloads(tmp_path_factory):
    """--encoder-attention local --eva-rpe-type table (the authors' masked-LM local attention, with its bias of one
    scalar per head, query place and key place): a few updates train it, and the checkpoint reloads that table,
    w x w x H = 16 x 16 x 4 parameters a layer, which the updates after the first moved."""
    from fairseq_eva.attention import PlaceBias

    data = lm_data(tmp_path_factory)
    save = tmp_path_factory.mktemp("mlm_table_ckpt")
    proc = run(
        "fairseq-train", data["bin"], "--user-dir", USER_DIR, "--cpu", "--task", "masked_lm", "--criterion", "masked_lm",
        "--arch", "roberta_eva_tiny", "--encoder-attention", "local", "--eva-rpe-type", "table",
        "--tokens-per-sample", 64, "--sample-break-mode", "none", "--optimizer", "adam", "--lr", "3e-3",
        "--max-tokens", 2048, "--max-update", 3, "--log-format", "json", "--log-interval", 1, "--seed", 1,
        "--save-dir", save, "--no-epoch-checkpoints", "--disable-validation", "--save-interval-updates", 1, cwd=save,
    )
    losses = [r["loss"] for r in json_records(proc.log, "train_inner")]
    assert len(losses) == 3 and all(is_finite(x) for x in losses)
    models, _ = checkpoint_utils.load_model_ensemble([str(save / "checkpoint_last.pt")],
                                                     arg_overrides={"data": str(data["bin"])})
    attn = models[0].encoder.sentence_encoder.layers[0].self_attn
    assert (attn.window_size, attn.num_chunks, attn.chunk_size) == (16, 0, 0) and isinstance(attn.rpe, PlaceBias)
    assert attn.rpe.bias.shape == (4, 16, 16)
    first = torch.load(save / "checkpoint_1_1.pt", weights_only=True)["model"]
    assert (first["encoder.sentence_encoder.layers.0.self_attn.rpe.bias"] - attn.rpe.bias).abs().max() > 1e-3


@pytest.mark.slow
def test_mlm_order_reads_the_masks_fairseq_validate_reads_and_shuffles_each_block(trained):
    data, save, _ = trained
    checkpoint = save / "checkpoint_last.pt"
    valid = run("fairseq-validate", data["bin"], "--user-dir", USER_DIR, "--cpu", "--path", checkpoint,
                "--task", "masked_lm", "--valid-subset", "valid", "--max-tokens", 2048, cwd=save)
    expected = float(re.search(r"valid on 'valid' subset .*\| ppl ([0-9.]+)", valid.log).group(1))
    order = run("python", REPO / "scripts" / "mlm_order.py", "--data", data["bin"], "--subset", "valid",
                checkpoint, cwd=save)
    row = [line for line in order.stdout.splitlines() if line.startswith(f"| {checkpoint} |")]
    assert len(row) == 1, order.log[-3000:]
    updates, blocks, masked, ppl, shuffled, ratio = (float(x) for x in row[0].strip("| ").split(" | ")[1:])
    assert updates == UPDATES
    assert ppl == pytest.approx(expected, abs=0.011)  # both printed to two decimals
    assert blocks > 1 and masked > 0 and shuffled > 1 and ratio == pytest.approx(shuffled / ppl, abs=0.01)


def test_shuffle_keeps_the_first_token_and_the_padding_and_moves_targets_with_their_inputs():
    from benchmarks.experiments import mlm_order

    pad = 1
    src = torch.arange(10, 42).view(2, 16)
    src[1, 12:] = pad
    tgt = torch.where(src % 3 == 0, src + 1000, torch.full_like(src, pad))  # a target beside every third input
    a, b = mlm_order.shuffle_blocks(src, tgt, pad, torch.Generator().manual_seed(0))
    assert torch.equal(a[:, 0], src[:, 0]) and torch.equal(a[1, 12:], src[1, 12:])
    for row in range(2):
        assert sorted(a[row].tolist()) == sorted(src[row].tolist())
    assert not torch.equal(a, src)
    assert torch.equal(b, torch.where(a % 3 == 0, a + 1000, torch.full_like(a, pad)))
