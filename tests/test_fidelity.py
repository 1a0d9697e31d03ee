"""The paper's configs at full size (benchmarks/fidelity.py): the record holds what the configs build now, counted
on the meta device (no full-size model is allocated), and every difference from the paper's #Params and FLOPs
beyond the tolerances is explained in docs/design.md. The layer count is checked against torch's FLOP counter on
a real forward at a tiny width."""

import os
import tempfile

import pytest
import torch

from benchmarks import fidelity
from benchmarks.pages import configs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.filterwarnings(r"ignore:\s*'\w+' is validated against ConfigStore schema:UserWarning")

# one row of each family, and the masked-LM rows whose count the per-place bias table or a missing projection sets
RECOUNTED = ["wmt14_en_de_eva32", "wikitext103_eva_16l", "mlm_eva_2048", "mlm_reformer_2048"]


@pytest.fixture(scope="module")
def record():
    return configs.fidelity_rows()


def test_the_record_has_every_config(record):
    assert sorted(record) == fidelity.rows()


@pytest.mark.parametrize("name", RECOUNTED)
def test_the_record_holds_what_the_config_builds_now(name, record):
    row = fidelity.measure([name])[0]
    assert row["params"] == record[name]["params"]
    assert ("macs" in row) == ("macs" in record[name]) and row.get("macs", 0) == pytest.approx(record[name].get("macs", 0))


def test_every_difference_beyond_the_tolerances_is_explained(record):
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as f:
        design = f.read()
    section = design.split("## The paper's configs at full size", 1)[1].split("\n## ", 1)[0]
    beyond = [name for name, r in record.items() if configs.beyond_tolerance(r)]
    assert beyond, "no row differs: the section can go"
    assert [name for name in beyond if f"`{name}`" not in section] == []


def test_the_layer_count_is_the_flop_counters_on_a_real_forward():
    """A softmax masked-LM layer at a tiny width on the CPU: projections, feed-forward and 2 N^2 D of attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    tiny = ["+model.encoder_layers=1", "+model.encoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
            "+model.encoder_attention_heads=2", "task.tokens_per_sample=64", "model.max_positions=64"]
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "dict.txt"), "w") as f:
            f.write("".join(f"w{i} 1\n" for i in range(50)))
        cfg = fidelity.compose("mlm_softmax_2048", [f"task.data={folder}", *tiny])
        from fairseq import tasks

        model = tasks.setup_task(cfg.task).build_model(cfg.model).eval()
    layer, N = fidelity.transformer_layers(model)[0], 64
    # (the counter sees the attention's products on SDPA's math path; the CPU's fused kernel is not counted)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        layer(torch.randn(N, 1, 32), None)
    assert counter.get_total_flops() == 2 * N * fidelity.layer_macs_per_token(layer, N, {})
