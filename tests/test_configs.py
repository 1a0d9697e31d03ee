"""The fairseq-hydra-train configs: one per row of the paper, the paper's hyperparameters (its
appendix, as the README lists them), and each one builds its model through fairseq's hydra path (at a tiny size), so that the
configs cannot drift from the code. A real fairseq-hydra-train run per task is in test_configs_train.py."""

import glob
import os

import pytest
import torch
from omegaconf import OmegaConf

from benchmarks.fidelity import compose  # what fairseq-hydra-train composes from a config
from fairseq_eva.attention import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")

WMT = {"wmt14_en_de_eva16": 8, "wmt14_en_de_eva32": 16, "wmt14_en_de_eva64": 32, "wmt14_en_de_softmax": None}
WIKI = {"wikitext103_eva_16l": ("eva", 16), "wikitext103_softmax_16l": ("softmax", 16),
        "wikitext103_eva_32l": ("eva", 32), "wikitext103_softmax_32l": ("softmax", 32)}
MLM = {"mlm_eva_2048": ("eva", 2048), "mlm_softmax_2048": ("softmax", 2048),
       "mlm_eva_4096": ("eva", 4096), "mlm_softmax_4096": ("softmax", 4096)}
# the baselines of the paper's tables: config -> (attention, the settings of the paper's row)
BASELINES = {
    "wmt14_en_de_performer128": ("performer", {"performer_num_features": 128, "performer_kernel": "positive"}),
    "wmt14_en_de_lara16": ("lara", {"lara_num_landmarks": 16}),
    "wmt14_en_de_lara32": ("lara", {"lara_num_landmarks": 32}),
    "wmt14_en_de_lara64": ("lara", {"lara_num_landmarks": 64}),
    "wikitext103_elu_16l": ("elu", {}),
    "wikitext103_rfa_16l": ("rfa", {}),
    "wikitext103_t2r_16l": ("t2r", {"t2r_num_features": 32}),
    "mlm_local_2048": ("local", {"eva_window_size": 256, "eva_overlap": False}),
    "mlm_performer_2048": ("performer", {"performer_kernel": "relu", "performer_num_features": 256}),
    "mlm_linformer_2048": ("linformer", {"linformer_projected_dim": 256}),
    "mlm_reformer_2048": ("reformer", {"reformer_num_hashes": 4, "reformer_chunk_size": 64}),
    "mlm_lara_2048": ("lara", {"lara_num_landmarks": 256}),
    "mlm_combiner_2048": ("combiner", {"combiner_span": 256, "combiner_abstraction": "deepsets-max",
                                       "combiner_rpe_type": "table"}),
    "mlm_long_short_2048": ("long_short", {"long_short_window_size": 256, "long_short_num_landmarks": 128}),
}
WMT.update({name: None for name in BASELINES if name.startswith("wmt14")})
WIKI.update({name: (attention, 16) for name, (attention, _) in BASELINES.items() if name.startswith("wikitext103")})
MLM.update({name: (attention, 2048) for name, (attention, _) in BASELINES.items() if name.startswith("mlm")})
ALL = sorted([*WMT, *WIKI, *MLM])

# fairseq-hydra-train stores its schema under the config's name; hydra 1.3 warns about it
pytestmark = pytest.mark.filterwarnings(r"ignore:\s*'\w+' is validated against ConfigStore schema:UserWarning")

# tiny sizes that keep each config's architecture name and its EVA settings
TINY = {
    "wmt14": ["+model.encoder_layers=1", "+model.decoder_layers=1", "+model.encoder_embed_dim=32",
              "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64", "+model.decoder_ffn_embed_dim=64",
              "+model.encoder_attention_heads=2", "+model.decoder_attention_heads=2"],
    "wikitext103": ["+model.decoder_layers=1", "+model.decoder_embed_dim=32", "+model.decoder_input_dim=32",
                    "+model.decoder_output_dim=32", "+model.decoder_ffn_embed_dim=64", "+model.decoder_attention_heads=2",
                    "+model.adaptive_input_cutoff='50,100'", "+model.adaptive_softmax_cutoff='50,100'"],
    "mlm": ["+model.encoder_layers=1", "+model.encoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
            "+model.encoder_attention_heads=2"],
}


def load(name):
    return OmegaConf.load(os.path.join(CONFIGS, name + ".yaml"))


def test_one_config_per_paper_row():
    found = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(CONFIGS, "*.yaml")))
    assert found == ALL


@pytest.mark.parametrize("name", sorted(WMT))
def test_wmt14_hyperparameters(name):
    c = load(name)
    assert c.model._name == "transformer_eva_wmt_en_de"
    assert (c.model.dropout, c.model.attention_dropout) == (0.1, 0.1)
    assert c.model.decoder_attention == "softmax"
    assert c.optimizer._name == "adam" and eval(c.optimizer.adam_betas) == (0.9, 0.98)
    assert c.optimizer.adam_eps == 1e-6 and c.optimizer.weight_decay == 0
    assert c.lr_scheduler._name == "inverse_sqrt" and c.lr_scheduler.warmup_updates == 6000
    assert list(c.optimization.lr) == [7e-4] and c.optimization.max_update == 300000
    assert c.optimization.clip_norm == 5.0
    assert c.criterion._name == "label_smoothed_cross_entropy" and c.criterion.label_smoothing == 0.1
    # 32768 tokens a batch on the 8 GPUs the configs assume
    assert c.dataset.max_tokens * 8 * c.optimization.update_freq[0] == 32768
    window = WMT[name]
    if name in BASELINES:
        check_baseline(c, name, "encoder_attention")
    elif window is None:
        assert c.model.encoder_attention == "softmax"
    else:  # abs(E) = 2 x window with overlap, C = 8, RPE on
        assert c.model.encoder_attention == "eva"
        assert (c.model.eva_window_size, c.model.eva_overlap, c.model.eva_num_chunks) == (window, True, 8)
        assert c.model.eva_rpe is True and c.model.eva_proposal == "layernorm"


@pytest.mark.parametrize("name", sorted(WIKI))
def test_wikitext103_hyperparameters(name):
    c = load(name)
    attention, layers = WIKI[name]
    assert c.model._name == "transformer_lm_eva_wiki103" + ("_32l" if layers == 32 else "")
    assert c.model.decoder_attention == attention
    assert (c.model.dropout, c.model.attention_dropout) == (0.3, 0.1)
    assert c.model.get("decoder_layerdrop", 0) == (0.2 if layers == 32 else 0)
    assert c.task.tokens_per_sample == 512
    assert c.optimizer._name == "nag" and list(c.optimization.lr) == [1.0]
    assert c.lr_scheduler._name == "cosine" and c.lr_scheduler.warmup_updates == 16000
    assert c.optimization.max_update == 286000 and c.optimization.clip_norm == 0.1
    assert c.dataset.max_tokens * 8 * c.optimization.update_freq[0] == 65536
    if name in BASELINES:
        check_baseline(c, name, "decoder_attention")
    if attention == "eva":  # abs(E) = 128, chunk size 8: C = 64 at length 512
        assert (c.model.eva_window_size, c.model.eva_chunk_size, c.model.eva_overlap) == (128, 8, False)
        assert c.task.tokens_per_sample // c.model.eva_chunk_size == 64


@pytest.mark.parametrize("name", sorted(MLM))
def test_mlm_hyperparameters(name):
    c = load(name)
    attention, length = MLM[name]
    assert c.model._name == ("roberta_eva" if length == 2048 else "roberta_eva_4096")
    assert c.model.encoder_attention == attention
    assert c.task.tokens_per_sample == length == c.model.max_positions
    assert (c.model.dropout, c.model.attention_dropout) == (0.1, 0.0)
    assert eval(c.optimizer.adam_betas) == (0.9, 0.98) and c.optimizer.adam_eps == 1e-6
    assert c.optimizer.weight_decay == 0.01
    assert list(c.optimization.lr) == [1e-4] and c.optimization.clip_norm == 0
    assert c.lr_scheduler._name == "polynomial_decay" and c.lr_scheduler.warmup_updates == 5000
    assert c.lr_scheduler.total_num_update == c.optimization.max_update == 200000
    assert c.dataset.batch_size * 8 * c.optimization.update_freq[0] == 256
    if name in BASELINES:
        check_baseline(c, name, "encoder_attention")
    if attention == "eva":
        assert (c.model.eva_window_size, c.model.eva_num_chunks) == (256, 128)
    if attention in ("eva", "local"):  # the per-place bias table that makes the paper's 136M (benchmarks/fidelity.py)
        assert c.model.eva_rpe is True and c.model.eva_rpe_type == "table"


def check_baseline(c, name, key):
    attention, settings = BASELINES[name]
    assert c.model[key] == attention
    assert {k: c.model[k] for k in settings} == settings
    assert not any(k.startswith("eva_") for k in c.model) or attention == "local"  # no options of another mechanism


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    """Dictionaries are all a model build needs from a data folder."""
    d = tmp_path_factory.mktemp("dicts")
    words = "".join(f"w{i} {1000 - i}\n" for i in range(300))
    for name in ("dict.txt", "dict.en.txt", "dict.de.txt"):
        (d / name).write_text(words)
    return str(d)


@pytest.mark.parametrize("name", ALL)
def test_config_builds_its_model(name, dicts):
    from fairseq import tasks

    import fairseq_eva.plugin  # noqa: F401  (registers the models)

    family = name.split("_")[0]
    cfg = compose(name, [f"task.data={dicts}", *TINY[family]])
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    kinds = {type(m).__name__ for m in model.modules() if "Attention" in type(m).__name__}
    attention = cfg.model.get("encoder_attention") if family != "wikitext103" else cfg.model.decoder_attention
    eva = [m for m in model.modules() if type(m).__name__ == "EVAMultiheadAttention"]
    if attention == "eva":
        assert eva, kinds
        window = cfg.model.eva_window_size
        assert all(m.window_size == window for m in eva)
        if family == "wikitext103":
            assert all(m.causal and m.chunk_size == cfg.model.eva_chunk_size for m in eva)
        else:
            assert all(not m.causal and m.num_chunks == cfg.model.eva_num_chunks for m in eva)
            assert all(m.rpe is not None for m in eva)
    else:
        assert not eva or attention == "local", kinds
    if name in BASELINES:
        core = registry.get(attention).module_class()
        layers = [m for m in model.modules() if isinstance(m, core)]
        assert layers and all(m.causal == (family == "wikitext103") for m in layers), kinds
        if attention == "local":
            assert all(m.chunks is None and m.window_size == 256 for m in layers)
    # and a forward pass
    model.eval()
    tokens = torch.randint(4, 100, (2, 24))
    with torch.no_grad():
        if family == "wmt14":
            out = model(tokens, torch.full((2,), 24), tokens)
        elif family == "wikitext103":
            out = model(tokens)
        else:
            out = model(tokens, masked_tokens=None)
    assert torch.isfinite(out[0]).all()


# tiny data sizes on top of TINY, for a real run on the bundled sample
TINY_RUN = {
    "wmt14": ["dataset.max_tokens=1024"],
    "wikitext103": ["task.tokens_per_sample=64", "dataset.max_tokens=1024"],
    "mlm": ["task.tokens_per_sample=64", "model.max_positions=64", "dataset.batch_size=8", "optimization.update_freq=[1]"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_each_baseline_config_trains_on_the_sample_and_decodes(name, tmp_path_factory):
    """fairseq-hydra-train on the bundled sample (3 updates, tiny sizes, the row's attention settings), then
    fairseq-generate (beam search) for translation and fairseq-eval-lm for the language models."""
    from fairseq_helpers import USER_DIR, is_finite, json_records, lm_data, run, translation_data

    family = name.split("_")[0]
    data = (translation_data if family == "wmt14" else lm_data)(tmp_path_factory)["bin"]
    save = tmp_path_factory.mktemp(name)
    proc = run("fairseq-hydra-train", "--config-dir", CONFIGS, "--config-name", name, f"task.data={data}",
               f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={save}", "common.fp16=false", "common.cpu=true",
               "optimization.max_update=3", "common.log_interval=1", *TINY[family], *TINY_RUN[family], cwd=save)
    losses = [r["loss"] for r in json_records(proc.log, "train_inner")]
    assert len(losses) == 3 and all(is_finite(x) for x in losses), proc.log[-3000:]
    checkpoint = save / "checkpoint_last.pt"
    if family == "wmt14":
        out = run("fairseq-generate", data, "--user-dir", USER_DIR, "--cpu", "--path", checkpoint, "--beam", 4,
                  "--lenpen", 0.6, "--max-len-b", 10, "--batch-size", 16, "--gen-subset", "test")
        assert len([line for line in out.stdout.splitlines() if line.startswith("H-")]) == 40
    elif family == "wikitext103":
        out = run("fairseq-eval-lm", data, "--user-dir", USER_DIR, "--cpu", "--path", checkpoint,
                  "--tokens-per-sample", 64, "--max-tokens", 2048, "--gen-subset", "valid")
        assert "Perplexity:" in out.log
