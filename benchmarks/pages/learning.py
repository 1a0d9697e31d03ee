"""Does EVA learn like softmax attention, and better than local attention: the causal LM at 2,000 pieces (read
through benchmarks.lm_tables), the masked LM on an H200, recall of a span beyond the window, what an update costs,
and the orderings of these rows by the rule."""

from benchmarks.experiments import long_context
from benchmarks.experiments.recall import recall_share
from benchmarks.pages import records
from benchmarks.pages.rule import rule_over, rule_sentence
from benchmarks.pages.words import BASELINE_NAMES


def causal_lm():
    """benchmarks.lm_tables, with the records of its six runs noted: it reads them itself (its ROWS)."""
    from benchmarks import lm_tables

    for run in lm_tables.ROWS.values():
        records.within(run)
    return lm_tables


def valid_by_updates(*run):
    """{updates: valid_small perplexity} of a run's curve, as benchmarks.mlm_table's from_curve reads it."""
    return {r["updates"]: r["ppl"] for r in records.curve(*run)}


def cost_an_update(*path):
    last = records.curve(*path)[-1]
    return last["cpu_s"] / last["updates"]


def causal_lm_updates():
    """valid_small perplexity of the causal LM's six runs at equal updates, as benchmarks.lm_tables reads them."""
    lm_tables = causal_lm()
    head = ["updates", *lm_tables.ROWS, "local minus EVA", "EVA's share (means)", "EVA's share (seeds)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for p in lm_tables.UPDATES:
        v = {name: lm_tables.at_updates(c, p) for name, c in lm_tables.curves().items()}
        cells = [f"{p:,}", *("-" if x is None else f"{x:.2f}" for x in v.values()), *lm_tables.comparison(v)[3:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def causal_lm_cpu_time(minutes=(30, 90, 180), test=180):
    """valid_small perplexity at equal CPU time (interpolated) and test at context 0 / 256, as benchmarks.lm_tables
    reads them; the comparison columns compare valid, and context 256 on test."""
    lm_tables = causal_lm()
    head = ["CPU minutes", *lm_tables.ROWS, "local minus EVA", "EVA's share (means)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m in minutes:
        v = {name: lm_tables.at_minutes(c, m) for name, c in lm_tables.curves().items()}
        cells = [f"{m}, valid", *("-" if x is None else f"{x:.2f}" for x in v.values()), *lm_tables.comparison(v)[3:5]]
        lines.append("| " + " | ".join(cells) + " |")
    tests = {name: lm_tables.test_at(d, test) for name, d in lm_tables.ROWS.items()}
    cells = [f"{t['0']:.2f} / {t['256']:.2f}" for t in tests.values()]
    at256 = {name: t["256"] for name, t in tests.items()}
    lines.append(f"| {test}, test | " + " | ".join(cells + lm_tables.comparison(at256)[3:5]) + " |")
    return "\n".join(lines)


def eva_cost_against_local():
    """The causal LM's CPU time an update of EVA against local attention, seeds 1 and 2, over each whole run."""
    return [cost_an_update("causal_lm_v2k_180min", f"eva{s}") / cost_an_update("causal_lm_v2k_180min", f"local{s}")
            for s in ("", "-seed2")]


def causal_lm_costs():
    """CPU time an update of EVA against local attention and of exact attention against EVA, each seed over its
    whole run (180 CPU minutes)."""
    eva = eva_cost_against_local()
    exact = [cost_an_update("causal_lm_v2k", f"exact{s}") / cost_an_update("causal_lm_v2k_180min", f"eva{s}")
             for s in ("", "-seed2")]
    return (f"- Over the first 180 CPU minutes EVA costs {eva[0]:.2f}x and {eva[1]:.2f}x local attention's CPU time an "
            f"update (seeds 1 and 2), exact attention {exact[0]:.2f}x and {exact[1]:.2f}x EVA's.")


def chunks_of_4():
    """CPU time an update of chunks of 4 against chunks of 8 (and local), at equal updates up to the shorter run's
    end and over each whole run."""
    record = "causal_lm_chunks_of_4"
    c8 = {r["updates"]: r["cpu_s"] for r in records.curve(record, "eva")}
    lines = ["| row | updates | CPU s | CPU s an update | against chunks of 8: whole run, at equal updates |",
             "|---|---|---|---|---|"]
    for row, label in (("eva-128-4", "chunks of 4, seed 1"), ("eva-128-4-seed2", "chunks of 4, seed 2"),
                       ("eva", "chunks of 8"), ("local", "local")):
        points = records.curve(record, row)
        last = points[-1]
        whole = cost_an_update(record, row) / cost_an_update(record, "eva")
        equal = [r["cpu_s"] / c8[r["updates"]] for r in points if r["updates"] in c8 and r["updates"] >= 1000]
        compare = f"{whole:.2f}x, {min(equal):.2f}-{max(equal):.2f}x" if row != "eva" else "-"
        lines.append(f"| {label} | {last['updates']:,} | {last['cpu_s']:.0f} | {last['cpu_s'] / last['updates']:.3f} "
                     f"| {compare} |")
    return "\n".join(lines)


def causal_lm_rule():
    """The causal LM's exact, EVA and local rows (two seeds each) by the rule: at each point of equal updates and
    of equal CPU time (valid_small), and on test at context 256 at the end."""
    lm_tables = causal_lm()
    curves = lm_tables.curves()

    def by_row(values):
        return {row: lm_tables.seeds(values, row) for row in ("exact", "EVA", "local")}

    updates = [(u, by_row({n: lm_tables.at_updates(c, u) for n, c in curves.items()})) for u in lm_tables.UPDATES]
    minutes = [(m, by_row({n: lm_tables.at_minutes(c, m) for n, c in curves.items()})) for m in lm_tables.MINUTES]
    test = by_row({name: lm_tables.test_at(d, 180)["256"] for name, d in lm_tables.ROWS.items()})
    return updates, minutes, test


def causal_lm_orderings():
    """The causal LM's orderings by the rule at each point of its two tables and on test."""
    updates, minutes, test = causal_lm_rule()
    return (f"- By the rule of the tables (every seed of one row below every seed of the other), valid_small perplexity "
            f"at equal updates ({updates[0][0]:,} to {updates[-1][0]:,}): {rule_over(updates, 'updates')}.\n"
            f"- At equal CPU time ({minutes[0][0]} to {minutes[-1][0]} minutes): {rule_over(minutes, 'minutes')}.\n"
            f"- On test at context 256 after 180 CPU minutes: {rule_sentence(test)}.")


MLM_H200_UPDATES = (3000, 4750, 6250, 8750)  # the masked LM on an H200: the points of equal updates the page shows


MLM_H200_ROWS = {"exact": [("mlm_h200_eva_exact", "mlm-exact-seed2")],
                 "EVA": [("mlm_h200_eva_exact", "mlm-eva-32-16"), ("mlm_h200_eva_exact", "mlm-eva-32-16-seed2")],
                 "local": [("mlm_h200_local", "mlm-local-32"), ("mlm_h200_local", "mlm-local-32-seed2")]}


def mlm_h200():
    """valid_small perplexity at equal updates (the curve files, rounded once) and test, as benchmarks.mlm_table reads them."""
    from benchmarks import mlm_table

    updates = MLM_H200_UPDATES
    rows = [("exact, seed 2", [("mlm_h200_eva_exact", "mlm-exact-seed2")]),
            ("EVA (32, 16)", [("mlm_h200_eva_exact", "mlm-eva-32-16"), ("mlm_h200_eva_exact", "mlm-eva-32-16-seed2")]),
            ("local (32)", [("mlm_h200_local", "mlm-local-32"), ("mlm_h200_local", "mlm-local-32-seed2")])]
    head = [f"{updates[0]:,} updates", *(f"{u:,}" for u in updates[1:])]
    lines = ["| row | " + " | ".join(head) + " | test (masked tokens) |", "|---" * 6 + "|"]
    for label, runs in rows:
        curves = [valid_by_updates(*run) for run in runs]
        cells = [", ".join(f"{c[u]:.2f}" for c in curves) for u in updates]
        tests = ", ".join(f"{records.load(*run, 'test_ppl.json')['test']:.2f}" for run in runs)
        at = ", ".join(f"{records.curve(*run)[-1]['updates']:,}" for run in runs)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {tests} at {at} updates |")
    warm = mlm_table.from_progress(records.path("mlm_h200_warmup1000", "progress_exact_6.5.log"))
    cells = [f"{warm[u]:.1f}" if u in warm else "" for u in updates]
    lines.append("| exact, seed 1, warm-up 1000 (the progress log: one decimal) | " + " | ".join(cells) + " | "
                 + exact_warmup1000_test() + " |")
    return "\n".join(lines)


def exact_warmup1000_test():
    """The warm-up 1000 exact row's test perplexity and updates, from its report."""
    report = records.text("mlm_h200_warmup1000", "results_exact.md")
    row = next(line for line in report.splitlines() if line.startswith("| exact | 1 |"))
    cells = [c.strip() for c in row.strip("|\n").split("|")]
    return f"{float(cells[6]):.2f} at {int(cells[3]):,} updates"


def mlm_h200_rule(updates=MLM_H200_UPDATES):
    """{row: [each seed's value]} of the masked LM on an H200 at each of `updates` (valid_small) and on test."""
    points = [(u, {row: [valid_by_updates(*run)[u] for run in runs] for row, runs in MLM_H200_ROWS.items()})
              for u in updates]
    test = {row: [records.load(*run, "test_ppl.json")["test"] for run in runs] for row, runs in MLM_H200_ROWS.items()}
    return points, test


def mlm_h200_orderings():
    """The masked LM on an H200 by the rule, at equal updates (valid_small) and on test."""
    points, test = mlm_h200_rule()
    return (f"- By the rule of the tables, valid_small perplexity at equal updates: {rule_over(points, 'updates')}; on "
            f"test: {rule_sentence(test)}.")


RECALL_ROWS = [("exact", [("recall_10000_updates", "exact")]),
               ("exact, seed 2", [("recall_by_chunk_size", "exact-seed2")]),
               ("EVA, chunks of 4 (seeds 1, 2)", [("recall_10000_updates", "eva4"), ("recall_by_chunk_size", "eva4-seed2")]),
               ("EVA, chunks of 8", [("recall_by_chunk_size", "eva8")]),
               ("EVA, chunks of 16", [("recall_by_chunk_size", "eva16")]),
               ("local (window 64)", [("recall_7000_updates", "local")])]


def recall_shares(ppl):
    """The share of exact attention's recall against local attention's (seed 1 of each) of each recall report,
    as scripts/recall.py's report computes it."""

    exact, local = (records.load(*RECALL_ROWS[i][1][0], "recall.json")["repeated"] for i in (0, -1))
    return [recall_share(p["repeated"], local, exact) for p in ppl]


def recall():
    """Test perplexity on the first half and the repeated part of the recall blocks, and the share of exact
    attention's recall against local attention's (recall_shares)."""
    lines = ["| row | updates | test, first half A | repeated part B | share | B without the chunks at test |",
             "|---|---|---|---|---|---|"]
    for label, runs in RECALL_ROWS:
        ppl = [records.load(*run, "recall.json") for run in runs]
        updates = ", ".join(dict.fromkeys(f"{records.curve(*run)[-1]['updates']:,}" for run in runs))
        shares = recall_shares(ppl)
        bold = "**" if label.startswith("EVA") or label.startswith("exact") else ""
        bold_share = "**" if label.startswith("EVA") else ""
        repeated = bold + ", ".join(f"{p['repeated']:.2f}" for p in ppl) + bold
        share = bold_share + ", ".join(f"{s:.0%}" for s in shares) + bold_share
        cut = ", ".join(f"{p['without chunks']['repeated']:.2f}" for p in ppl if "without chunks" in p) or "-"
        first = ", ".join(f"{p['first half']:.2f}" for p in ppl)
        lines.append(f"| {label} | {updates} | {first} | {repeated} | {share} | {cut} |")
    return "\n".join(lines)


def learning_orderings():
    """The learning section's answer as the rule orders it: the causal LM on test and at its last point of equal
    updates, the masked LM on an H200 on test, EVA and local in the baselines' comparison on test, and recall."""

    updates, _, test = causal_lm_rule()
    _, mlm_test = mlm_h200_rule()
    small = {}
    for (row, _), r in long_context.row_results(records.folder("baselines_small"), "lm").items():
        if row in ("eva", "local"):
            small.setdefault(BASELINE_NAMES[row], []).append(r["test"]["256"])
    return "\n".join([
        "By the rule of the tables (every seed of one row below every seed of the other in perplexity):", "",
        f"- causal LM, test at context 256 after 180 CPU minutes: {rule_sentence(test)}.",
        f"- causal LM, valid_small at {updates[-1][0]:,} updates: {rule_sentence(updates[-1][1])}.",
        f"- masked LM on an H200, test: {rule_sentence(mlm_test)}.",
        f"- the baselines' causal LM, test at context 256 after 10 CPU minutes: {rule_sentence(small)}.",
        "- recall: exact and local attention have one seed each, which the rule orders against no row."])


TABLES = {
    "causal-lm-updates": causal_lm_updates,
    "causal-lm-cpu-time": causal_lm_cpu_time,
    "causal-lm-costs": causal_lm_costs,
    "causal-lm-chunks-of-4": chunks_of_4,
    "causal-lm-orderings": causal_lm_orderings,
    "mlm-h200": mlm_h200,
    "mlm-h200-orderings": mlm_h200_orderings,
    "recall": recall,
    "learning-orderings": learning_orderings,
}
