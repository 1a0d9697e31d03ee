"""The training and evaluation scripts end to end at a tiny size, on slices of the bundled sample:
data prep -> fairseq-hydra-train with the paper's config (tiny overrides) -> evaluation."""

import math
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample")
BIN = os.path.dirname(sys.executable)
ENV = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHON": sys.executable,
       "OMP_NUM_THREADS": "1", "WORKERS": "1", "NGPUS": "0"}


def run(args, env):
    r = subprocess.run(args, cwd=ROOT, env={**ENV, **env}, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r.stdout


def head(src, dst, n):
    with open(src, encoding="utf-8") as f:
        text = f.read().splitlines(keepends=True)[:n]
    with open(dst, "w", encoding="utf-8") as g:
        g.writelines(text)


def valid_records(log):
    return [m for m in re.findall(r'\]\[valid\]\[INFO\] - (\{.*\})', open(log, encoding="utf-8").read())]


@pytest.mark.slow  # (the demo test covers these scripts too; test_mlm_scripts stays in the fast suite)
def test_wmt14_scripts(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 400), ("valid", 20), ("test", 20)):
        for lang in ("en", "de"):
            head(f"{SAMPLE}/po_en_de/{split}.{lang}", raw / f"{split}.{lang}", n)
    data = tmp_path / "bin"
    run(["bash", "data_prep/prepare_wmt14_en_de.sh", "--raw", str(raw)],
        {"WORK": str(tmp_path / "work"), "DEST": str(data), "BPE_TOKENS": "100"})
    save = tmp_path / "ckpt"
    out = run(["bash", "scripts/train_wmt14.sh", "eva32", "optimization.max_epoch=3", "lr_scheduler.warmup_updates=5",
               "+model.encoder_layers=1", "+model.decoder_layers=1", "+model.encoder_embed_dim=32",
               "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64", "+model.decoder_ffn_embed_dim=64",
               "+model.encoder_attention_heads=2", "+model.decoder_attention_heads=2", "model.eva_window_size=4",
               "model.eva_num_chunks=2"],
              {"DATA": str(data), "SAVE_DIR": str(save), "MAX_TOKENS": "2048", "TOTAL_TOKENS": "2048"})
    assert "update_freq 1" in out
    for epoch in (1, 2, 3):
        assert (save / f"checkpoint{epoch}.pt").exists()
    assert (save / ".hydra" / "config.yaml").exists()  # hydra's record of the run sits with the checkpoints
    assert len(valid_records(save / "hydra_train.log")) == 3
    out = run(["bash", "scripts/eval_wmt14.sh", str(save)],
              {"DATA": str(data), "N_AVG": "2", "GEN_ARGS": "--max-len-a 1 --max-len-b 5"})
    # the average of the last two epoch checkpoints is what was evaluated
    avg = torch.load(save / "checkpoint_avg2.pt", weights_only=True)["model"]
    c2, c3 = (torch.load(save / f"checkpoint{e}.pt", weights_only=True)["model"] for e in (2, 3))
    key = next(k for k in avg if k.endswith("self_attn.q_proj.weight"))
    assert torch.allclose(avg[key], (c2[key].double() + c3[key].double()).div(2).float())
    bleu = (save / "bleu.test.txt").read_text()
    assert re.search(r"^BLEU4 = [\d.]+", bleu, re.M) and re.search(r"^BLEU\|nrefs:1.* = [\d.]+", bleu, re.M)
    assert len((save / "test.hyp.detok").read_text().splitlines()) == 20
    assert "beam=4" in (save / "gen.test.out").read_text().splitlines()[-1]


@pytest.mark.slow
def test_wikitext103_scripts(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 300), ("valid", 30), ("test", 30)):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", n)
    data = tmp_path / "bin"
    run(["bash", "data_prep/prepare_wikitext103.sh", "--raw", str(raw)],
        {"WORK": str(tmp_path / "work"), "DEST": str(data), "THRESHOLD": "1"})
    save = tmp_path / "ckpt"
    run(["bash", "scripts/train_wikitext103.sh", "eva_32l", "optimization.max_update=4", "task.tokens_per_sample=64",
         "+model.decoder_layers=2", "+model.decoder_embed_dim=32", "+model.decoder_input_dim=32",
         "+model.decoder_output_dim=32", "+model.decoder_ffn_embed_dim=64", "+model.decoder_attention_heads=2",
         "+model.adaptive_input_cutoff='200,500'", "+model.adaptive_softmax_cutoff='200,500'",
         "model.eva_window_size=16", "model.eva_chunk_size=4"],
        {"DATA": str(data), "SAVE_DIR": str(save), "MAX_TOKENS": "1024", "TOTAL_TOKENS": "1024"})
    out = run(["bash", "scripts/eval_lm.sh", str(save / "checkpoint_best.pt")],
              {"DATA": str(data), "TOKENS_PER_SAMPLE": "64", "CONTEXTS": "0 32", "SUBSETS": "valid test"})
    rows = [line.split("\t") for line in (save / "ppl.tsv").read_text().splitlines()]
    assert rows[0] == ["subset", "context", "loss_base2", "ppl"]
    assert [(r[0], r[1]) for r in rows[1:]] == [("valid", "0"), ("valid", "32"), ("test", "0"), ("test", "32")]
    for _, _, loss, ppl in rows[1:]:
        assert math.isclose(2 ** float(loss), float(ppl), rel_tol=1e-3)
    assert "context" in out


@pytest.mark.slow
def test_mlm_scripts(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split, n in (("train", 300), ("valid", 40)):
        head(f"{SAMPLE}/doc_en/{split}.txt", raw / f"{split}.txt", n)
    data = tmp_path / "bin"
    run(["bash", "data_prep/prepare_mlm.sh", "--raw", str(raw)],
        {"WORK": str(tmp_path / "work"), "DEST": str(data), "VOCAB_SIZE": "200", "BLOCKS": "128"})
    save = tmp_path / "ckpt"
    run(["bash", "scripts/train_mlm.sh", "eva_2048", "optimization.max_update=3", "task.tokens_per_sample=128",
         "model.max_positions=128", "+model.encoder_layers=1", "+model.encoder_embed_dim=32",
         "+model.encoder_ffn_embed_dim=64", "+model.encoder_attention_heads=2", "model.eva_window_size=16",
         "model.eva_num_chunks=4"],
        {"DATA": str(data), "SAVE_DIR": str(save), "BATCH_SIZE": "4", "TOTAL_SEQS": "8"})
    out = run(["bash", "scripts/eval_mlm.sh", str(save / "checkpoint_best.pt")], {"DATA": str(data)})
    ppl = float(re.search(r"valid perplexity: ([\d.]+)", out).group(1))
    trained = [float(x) for x in re.findall(r'"valid_ppl": "([\d.]+)"', (save / "hydra_train.log").read_text())]
    assert trained and math.isclose(ppl, trained[-1], rel_tol=0.02)  # the same masks (fairseq seeds them)
