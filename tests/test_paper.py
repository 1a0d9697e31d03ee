"""The paper's numbers (benchmarks/paper.json, read by benchmarks/paper.py): a handful of entries against the
paper's tables written out here, a row for every config, and the fidelity record quoting the same numbers."""

import json
import os

import pytest

from benchmarks import paper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("table, row, value", [
    ("mt", "eva64", 27.5), ("mt", "softmax", 27.5), ("mt", "eva16", 27.2), ("mt", "lara64", 27.0),
    ("lm", "eva_16l", 19.4), ("lm", "eva_32l", 18.3), ("lm", "softmax_16l", None),
    ("mlm", "softmax_2048", 3.74), ("mlm", "eva_2048", 3.94), ("mlm", "eva_4096", 3.73), ("mlm", "reformer_2048", 4.28),
])
def test_the_tables_measures(table, row, value):
    assert paper.measure(table, row) == value


def test_sizes_and_settings():
    sizes = paper.sizes()
    assert sizes["wmt14_en_de_softmax"][:2] == (60.92, None) and sizes["wmt14_en_de_eva16"][:2] == (60.96, None)
    assert sizes["wikitext103_eva_32l"][:2] == (450, None)
    assert sizes["wikitext103_elu_16l +model.decoder_layers=32"] == (
        449, None, "the EVA paper's Wikitext-103 table (quoted from Kasai et al. 2021)")
    assert sizes["mlm_softmax_2048"][:2] == (126, 252) and sizes["mlm_eva_2048"][:2] == (136, 184)
    assert sizes["mlm_eva_4096"][:2] == (None, 387)
    assert paper.settings("mlm", "eva_2048") == {"window_size": 256, "num_chunks": 128}
    assert paper.settings("mlm", "reformer_2048") == {"num_hashes": 4, "chunk_size": 64}


def test_every_config_has_its_row():
    configs = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".yaml"))
    rows = sorted(paper.config(table, row).split(" ")[0] for table in paper.TABLES for row in paper.rows(table))
    assert rows == configs


def test_the_fidelity_record_quotes_these_numbers():
    with open(os.path.join(ROOT, "benchmarks", "results", "fidelity", "fidelity.json")) as f:
        record = {r["config"]: r for r in json.load(f)["results"]}
    quoted = {config: (r["paper_params_m"], r["paper_flops_g"], r["paper_source"]) for config, r in record.items()
              if r["paper_source"]}
    assert quoted == paper.sizes()
