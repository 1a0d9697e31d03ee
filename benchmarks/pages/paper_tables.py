"""The paper's translation and masked-LM tables at the sample's scale (scripts/paper_table.py's and
scripts/long_context.py's records, read by the harnesses' own readers), with their orderings, and the masked-LM
search on the CPU that set the masked LM's scale."""

from benchmarks import paper
from benchmarks.experiments import long_context, paper_table, reports
from benchmarks.pages import records
from benchmarks.pages.rule import rule_pairs
from benchmarks.pages.words import listed


def translation_table():
    """The paper's translation table at the sample's scale (scripts/paper_table.py's record): each row's test BLEU,
    the mean over seeds with their range, and the orderings the seeds' spread decides."""

    runs = paper_table.collect("mt", records.folder("translation_table"))
    meta = records.load("translation_table", "meta.json")
    return "\n".join(paper_table.table_lines("mt", "sample", runs)) + f"\n\nCommand: `{meta['command']}`."


def translation_places():
    """Each row of the translation table by the rule (test BLEU): the rows it is above and below beyond the
    seeds' spread; the rest within it."""

    runs = paper_table.collect("mt", records.folder("translation_table"))
    scores = {row: [r["result"]["bleu"] for r in rs] for row, rs in runs.items()}
    pairs = rule_pairs(scores, higher=True)
    lines = []
    for row in scores:
        above = [b for a, b in pairs if a == row]
        below = [a for a, b in pairs if b == row]
        within = [r for r in scores if r != row and r not in above + below]
        parts = ([f"above {listed(above)}"] if above else []) + ([f"below {listed(below)}"] if below else [])
        parts.append(f"within the spread of {listed(within)}" if within else "within the spread of no row")
        lines.append(f"- {row}: " + "; ".join(parts) + ".")
    return "By the rule of the tables, test BLEU at the demo's 8 epochs:\n\n" + "\n".join(lines)


def translation_cells():
    """The translation table at the sample's scale, for the configs table: {mt_ROW: its test BLEU, the mean over
    seeds (lowest-highest)}, the number of seeds and the model's size."""

    runs = paper_table.collect("mt", records.folder("translation_table"))
    seeds = {len(rs) for rs in runs.values()}
    return {**{f"mt_{row}": paper_table.spread_text([r["result"]["bleu"] for r in rs]) for row, rs in runs.items()},
            "mt_seeds": "/".join(map(str, sorted(seeds))), "mt_scale": "2+2 layers of 64"}


MLM_SEARCH = [  # setting, record of its runs, its rows, the perplexity of predicting by frequency (its plateau)
    ("2,000 pieces, 8 blocks an update, warm-up 100 (the baselines above)", "baselines_small", ("softmax", "eva"),
     "frequency_v2000.json"),
    ("256 pieces, 4 blocks an update, warm-up 500", "mlm_plateau_search", ("softmax", "eva"), "frequency_v256.json"),
]


def mlm_plateau_search():
    """The masked-LM search on the CPU (scripts/long_context.py's records beside the perplexity of predicting by
    frequency, scripts/frequency_baseline.py): where each row goes below that plateau and below 3/4 of it."""

    def first_below(curve, level):
        point = next((p for p in curve if p["ppl"] < level), None)
        return "-" if point is None else f"{point['updates']:,} updates, {point['cpu_s'] / 60:.1f} CPU min"

    lines = ["| setting (blocks of 512, 2 layers of 128) | row | plateau: frequency ppl | below it from | below 3/4 "
             "of it from | at the end: updates, CPU min, valid_small ppl | test ppl (masked tokens) |",
             "|---|---|---|---|---|---|---|"]
    for setting, record, names, frequency in MLM_SEARCH:
        plateau = records.load("mlm_plateau_search", frequency)["perplexity"]
        for (row, seed), r in long_context.row_results(records.folder(record), "mlm").items():
            if row not in names:
                continue
            last = r["last"]
            lines.append(f"| {setting} | {row}{'' if seed == 1 else f', seed {seed}'} | {plateau:.1f} | "
                         f"{first_below(r['curve'], plateau)} | {first_below(r['curve'], 0.75 * plateau)} | "
                         f"{last['updates']:,}, {last['cpu_s'] / 60:.1f}, {last['ppl']:.1f} | {r['test']['test']:.1f} |")
    meta = records.load("mlm_plateau_search", "meta.json")
    return "\n".join(lines) + f"\n\nCommand (the second setting): `{meta['command']}`."


def mlm_table_runs():
    """The masked-LM table at the sample's scale (scripts/long_context.py's rows, recorded in mlm_table/):
    {config row: [each seed's run, as scripts/paper_table.py's orderings take it]}, and the plateau."""

    rows = long_context.row_results(records.folder("mlm_table"), "mlm")
    runs = {}
    for (row, _), r in rows.items():
        runs.setdefault(f"{row}_2048", []).append({"result": {"ppl": r["test"]["test"]}, "last": r["last"]})
    return runs, records.load("mlm_table", "frequency_v256.json")["perplexity"]


MLM_MEASURE = "test perplexity (masked tokens)"


def whole_spread(values):
    """The mean of whole numbers (updates), and their lowest and highest in brackets where they differ."""
    mean = f"{sum(values) / len(values):.0f}"
    return mean if min(values) == max(values) else f"{mean} ({min(values)}-{max(values)})"


def mlm_table():
    """The paper's masked-LM table at the sample's scale: each row's test perplexity over the masked tokens (the
    masks fixed by the seed, the same for every row), the mean over seeds with their range, beside the paper's
    validation perplexity; where the rows end; and the orderings the seeds' spread decides."""

    runs, plateau = mlm_table_runs()
    lines = [f"| row | paper (validation ppl) | {MLM_MEASURE} | seeds | valid_small ppl at the end | of the plateau | "
             "updates | CPU min |", "|---|---|---|---|---|---|---|---|"]
    for row, rs in runs.items():
        measure = paper.measure("mlm", row)
        last = [r["last"] for r in rs]
        lines.append(f"| {row} | {'-' if measure is None else measure} | "
                     f"{paper_table.spread_text([r['result']['ppl'] for r in rs])} | {len(rs)} | "
                     f"{paper_table.spread_text([p['ppl'] for p in last])} | "
                     f"{paper_table.spread_text([p['ppl'] / plateau for p in last])} | "
                     f"{whole_spread([p['updates'] for p in last])} | "
                     f"{paper_table.spread_text([p['cpu_s'] / 60 for p in last])} |")
    meta = records.load("mlm_table", "meta.json")
    return "\n".join([*lines, "", *(f"- {line}" for line in paper_table.orderings("mlm", runs, MLM_MEASURE))]) + (
        f"\n\nThe plateau: {plateau:.1f}, the perplexity of predicting each masked token by its training frequency "
        f"(scripts/frequency_baseline.py). Command: `{meta['command']}`.")


def mlm_cells():
    """The masked-LM table at the sample's scale, for the configs table: {mlm_ROW: its test perplexity, the mean over
    seeds (lowest-highest)} and the number of seeds."""

    runs, _ = mlm_table_runs()
    spread = reports.spread_text
    return {**{f"mlm_{row}": spread([r["result"]["ppl"] for r in rs]) for row, rs in runs.items()},
            "mlm_seeds": "/".join(map(str, sorted({len(rs) for rs in runs.values()})))}


TABLES = {
    "translation-table": translation_table,
    "translation-places": translation_places,
    "mlm-plateau-search": mlm_plateau_search,
    "mlm-table": mlm_table,
}
