"""The EVA paper's numbers, read from benchmarks/paper.json: the one place that holds them, so that the tables, the
fidelity record, the mechanisms' benchmark and the results pages quote the same paper."""

import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper.json")

with open(PATH, encoding="utf-8") as _f:
    TABLES = json.load(_f)["tables"]


def rows(table):
    """{row: its entry} of a table ("mt", "lm", "mlm"), in the paper's order."""
    return TABLES[table]["rows"]


def measure(table, row):
    """The table's measure of the row (BLEU, test or validation perplexity), or None where none is quoted."""
    return rows(table)[row][TABLES[table]["measure"]]


def measures(table):
    """{row: the table's measure or None}, a row for each config of the table, in the paper's order."""
    return {row: measure(table, row) for row in rows(table)}


def config(table, row):
    """The config (and its overrides, after spaces) that builds the paper's row: "wikitext103_elu_16l
    +model.decoder_layers=32" for the ELU row the paper quotes at 32 layers."""
    entry = rows(table)[row]
    return " ".join([TABLES[table]["config"].replace("ROW", row), *entry.get("overrides", [])])


def sizes():
    """{config: (#Params in M, FLOPs in G, where they come from)} of every row of every table; None where the paper
    gives none."""
    out = {}
    for table, info in TABLES.items():
        for row, entry in info["rows"].items():
            source = info["title"] + (f" ({entry['source']})" if "source" in entry else "")
            out[config(table, row)] = (entry.get("params_m"), entry.get("flops_g"), source)
    return out


def settings(table, row):
    """The row's attention options, as the registry names them."""
    return dict(rows(table)[row]["settings"])
