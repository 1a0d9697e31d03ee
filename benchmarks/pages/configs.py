"""The paper's configs: their parameters and multiply-adds at full size beside the paper's (the fidelity record),
what `make demo` gave, and the README's table of the configs: the paper's numbers, and what has been measured of
each."""

import re

from benchmarks import paper
from benchmarks.pages import records
from benchmarks.pages.gpu import measured_at, paper_config_ratios
from benchmarks.pages.paper_tables import mlm_cells, translation_cells
from benchmarks.pages.words import ratio_span

PARAMS_TOLERANCE, FLOPS_TOLERANCE = 0.01, 0.05  # beyond these a difference is fixed in the config or explained


def fidelity_rows():
    """{row: the fidelity record's row}: each config's parameters and layer multiply-adds beside the paper's."""
    return {r["config"]: r for r in records.load("fidelity", "fidelity.json")["results"]}


def millions(n):
    return f"{n / 1e6:.2f}M" if n < 1e8 else f"{n / 1e6:.1f}M"


def difference(ours, paper):
    percent = f"{100 * (ours / paper - 1):+.1f}%"
    return "0.0%" if percent[1:] == "0.0%" else percent


def beyond_tolerance(r):
    """Which of the row's two numbers differ from the paper's by more than the tolerances."""
    found = []
    if r["paper_params_m"] and abs(r["params"] / (r["paper_params_m"] * 1e6) - 1) > PARAMS_TOLERANCE:
        found.append("parameters")
    if r["paper_flops_g"] and abs(r["macs"] / (r["paper_flops_g"] * 1e9) - 1) > FLOPS_TOLERANCE:
        found.append("multiply-adds")
    return found


def fidelity():
    """Every config at full size: parameters and the layers' multiply-adds of one sequence, beside the paper's
    #Params and FLOPs, and the rows whose difference is beyond the tolerances."""
    meta = records.load("fidelity", "meta.json")
    lines = ["| config | parameters | paper's #Params | difference | multiply-adds of the layers, one sequence "
             "(length) | paper's FLOPs | difference | the paper's numbers from |", "|---" * 8 + "|"]
    for name, r in fidelity_rows().items():
        params, flops = r["paper_params_m"], r["paper_flops_g"]
        macs = f"{r['macs'] / 1e9:.1f}G ({r['length']})" if "macs" in r else "-"
        lines.append(
            f"| `{name}` | {millions(r['params'])} | {f'{params:g}M' if params else '-'} "
            f"| {difference(r['params'], params * 1e6) if params else '-'} | {macs} | {f'{flops:g}G' if flops else '-'} "
            f"| {difference(r['macs'], flops * 1e9) if flops else '-'} | {r['paper_source'] or '-'} |")
    beyond = [f"`{name}` ({' and '.join(found)})" for name, r in fidelity_rows().items()
              if (found := beyond_tolerance(r))]
    lines += ["", f"Beyond 1% in parameters or 5% in multiply-adds: {', '.join(beyond) or 'none'}; each is explained "
              "in [docs/design.md](design.md#the-papers-configs-at-full-size). Counted at commit "
              f"{meta['commit']} ({meta['date']}, {meta['device']}; record `benchmarks/results/fidelity/`)."]
    return "\n".join(lines)


def fidelity_params(configs):
    """The README's cell for a row of configs: each one's parameters at full size, with the paper's in brackets."""
    rows = fidelity_rows()
    cells = []
    for name in re.findall(r"`(\w+)`", configs):
        r = rows[name]
        paper = f" ({r['paper_params_m']:g}M)" if r["paper_params_m"] else ""
        cells.append(millions(r["params"]) + paper)
    return ", ".join(cells)


def demo():
    """The README's demo table: what a fresh `make demo` gave (benchmarks/results/demo/, its results.json)."""
    record, meta = records.load("demo", "results.json"), records.load("demo", "meta.json")
    lines = ["| `make demo` | updates | test BLEU, compound-split | sacreBLEU | first test sentences: hypothesis (reference) |",
             "|---|---|---|---|---|"]
    for row in record["translation"].values():
        first = "; ".join(f"{t['hypothesis']} ({t['reference']})" for t in row["first_test_translations"])
        lines.append(f"| translation, {row['label']} | {row['updates']} | {row['bleu_compound_split']:.2f} "
                     f"| {row['sacrebleu']:.2f} | {first.replace('|', '&#124;')} |")
    for row in record["language_model"].values():
        ppl = ", ".join(f"{r['ppl']:.1f} (context {r['context']})" for r in row["ppl"] if r["subset"] == "test")
        lines.append(f"| language model, {row['label']} | {row['updates']} | test perplexity {ppl} | | |")
    commit = meta["commit"]
    millions = [int(str(row["params"]).replace(",", "")) / 1e6 for row in record["translation"].values()]  # "337,344"
    params = " and ".join(dict.fromkeys(f"{m:.2f}M" for m in millions))
    lines += ["", f"Translation models of {params} parameters. Demo wall time {record['wall_seconds']} s on "
              f"{meta['device']}; {meta['date']}, commit {commit} (record `benchmarks/results/demo/`)."]
    return "\n".join(lines)


def quoted(table, *rows):
    """The paper's measures of the rows (benchmarks/paper.json), as the README quotes them."""
    return ", ".join(str(paper.measure(table, row)) for row in rows)


MLM_SAMPLE = ("at the sample's scale (2 layers of 128, blocks of 512, 256 pieces; [the table](docs/results.md#the-masked-"
              "lm-table-at-the-samples-scale)), {mlm_seeds} seeds: test perplexity ")


# The README's configs table: the paper's numbers as the paper quotes them (not measured here), and what has been
# run of each config; the words/s ratios come from the Triton check's paper_configs runs.
README_CONFIGS = [
    ("`wmt14_en_de_eva16`", f"BLEU {quoted('mt', 'eva16')}",
     "at the sample's scale ({mt_scale}; \\|E\\| = 4, C = 4), {mt_seeds} seeds: "
     "test BLEU {mt_eva16}; 60 fp16 updates on the sample, one H200: {wmt14_en_de_eva16} softmax's words/s"),
    ("`wmt14_en_de_eva32`", f"BLEU {quoted('mt', 'eva32')}",
     "at the sample's scale (\\|E\\| = 8, C = 4, as `make demo`): test BLEU {mt_eva32}"),
    ("`wmt14_en_de_eva64`", f"BLEU {quoted('mt', 'eva64')}",
     "at the sample's scale (\\|E\\| = 16, C = 4): test BLEU {mt_eva64}"),
    ("`wmt14_en_de_softmax`", f"BLEU {quoted('mt', 'softmax')}",
     "at the sample's scale: test BLEU {mt_softmax}; words/s on the H200"),
    ("`wikitext103_eva_16l`", f"test perplexity {quoted('lm', 'eva_16l')}", "only in `make demo`, at 2 layers of 64 on "
     "the sample ([the demo's table](#quick-start)); 60 fp16 updates, one H200: {wikitext103_eva_16l} softmax's words/s"),
    ("`wikitext103_softmax_16l`", "baseline", "words/s on the H200"),
    ("`wikitext103_eva_32l`", f"test perplexity {quoted('lm', 'eva_32l')}", "not run"),
    ("`wikitext103_softmax_32l`", "baseline", "not run"),
    ("`mlm_eva_2048`", f"validation perplexity {quoted('mlm', 'eva_2048')}", MLM_SAMPLE + "{mlm_eva_2048}"),
    ("`mlm_eva_4096`", f"validation perplexity {quoted('mlm', 'eva_4096')}",
     "60 fp16 updates on the sample, one H200: {mlm_eva_4096} softmax's words/s"),
    ("`mlm_softmax_2048`", quoted("mlm", "softmax_2048"), MLM_SAMPLE + "{mlm_softmax_2048}"),
    ("`mlm_softmax_4096`", quoted("mlm", "softmax_4096"), "words/s on the H200"),
    ("`mlm_local_2048`, `mlm_performer_2048`, `mlm_linformer_2048`, `mlm_reformer_2048`, `mlm_lara_2048`, "
     "`mlm_combiner_2048`, `mlm_long_short_2048`",
     f"the masked-LM table's baselines (Combiner {quoted('mlm', 'combiner_2048')}, Transformer-LS "
     f"{quoted('mlm', 'long_short_2048')}, Reformer {quoted('mlm', 'reformer_2048')})",
     MLM_SAMPLE + "{mlm_local_2048}, {mlm_performer_2048}, {mlm_linformer_2048}, {mlm_reformer_2048}, "
     "{mlm_lara_2048}, {mlm_combiner_2048}, {mlm_long_short_2048}; not run at size"),
    ("`wmt14_en_de_performer128`, `wmt14_en_de_lara16`, `wmt14_en_de_lara32`, `wmt14_en_de_lara64`",
     f"BLEU {quoted('mt', 'performer128', 'lara16', 'lara32', 'lara64')} (from the LARA paper)",
     "at the sample's scale (32 features; 4, 8, 16 landmarks): test BLEU {mt_performer128}, {mt_lara16}, "
     "{mt_lara32}, {mt_lara64} ([the table](docs/results.md#the-translation-table-at-the-samples-scale)); not run at "
     "size"),
    ("`wikitext103_elu_16l`, `wikitext103_rfa_16l`, `wikitext103_t2r_16l`",
     "the Wikitext-103 table's baselines (quoted there at 32 layers)",
     "not run at size; each trains and is scored by fairseq-eval-lm on the sample in `make test-slow`"),
]


def readme_paper_configs():
    ratios = {**{eva: ratio_span(r) for eva, r in paper_config_ratios().items()}, **translation_cells(), **mlm_cells()}
    meta = records.load("fidelity", "meta.json")
    lines = ["| config | paper | parameters at full size (the paper's) | measured here |", "|---|---|---|---|"]
    lines += [f"| {config} | {paper} | {fidelity_params(config)} | {measured.format(**ratios)} |"
              for config, paper, measured in README_CONFIGS]
    return "\n".join(lines) + (
        f"\n\nThe parameters: counted at commit {meta['commit']} ({meta['date']}) with the paper's dictionaries "
        "([the table](docs/results.md#the-papers-configs-at-full-size); record "
        "`benchmarks/results/fidelity/`). The words/s: " + measured_at("triton_check"))


TABLES = {
    "fidelity": fidelity,
    "demo": demo,
    "gpu-paper-configs-readme": readme_paper_configs,
}
