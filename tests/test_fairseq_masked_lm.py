"""End to end, through fairseq-train: the masked_lm task trains and validates a tiny roberta_eva."""

import pytest

pytest.importorskip("fairseq")

from fairseq import checkpoint_utils  # noqa: E402

import fairseq_eva  # noqa: E402,F401  (registers the models, for loading the checkpoint in this process)
from fairseq_helpers import USER_DIR, is_finite, json_records, lm_data, run  # noqa: E402

UPDATES = 12


def test_masked_lm_trains_and_validates_roberta_eva(tmp_path_factory):
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
