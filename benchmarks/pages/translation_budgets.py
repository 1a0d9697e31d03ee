"""The translation table at two budgets: the demo's 8 epochs and 24, for the rows that decide whether the sample's
reversal of the paper's order (softmax below EVA, EVA-16 above EVA-64) belongs to the short budget. Every ordering
is the tables' rule (benchmarks/experiments/reports.py's beyond_spread) on test BLEU."""

import os

import yaml

from benchmarks import paper
from benchmarks.experiments import paper_table, reports
from benchmarks.experiments.rows import CONTROLS
from benchmarks.pages import records
from benchmarks.pages.rule import rule_sentence
from benchmarks.pages.words import listed

ROWS = ("softmax", "exact", "local", "eva16", "eva64", "lara16", "performer128")
# 8 epochs: the paper's table, then the rows run again at the 24-epoch runs' commit (local, which the table lacks;
# exact and eva64, whose windows now stop at the sentence, so that attention dropout draws other numbers)
SHORT = ("translation_table", "translation_table_8_epochs")
LONG = "translation_table_24_epochs"
FLIP = {">": "<", "<": ">", "~": "~"}


def budgets():
    """({row: runs} at 8 epochs, {row: runs} at 24), of the ROWS both records hold, in that order."""
    short = {}
    for record in SHORT:
        short.update(paper_table.collect("mt", records.folder(record)))
    long = paper_table.collect("mt", records.folder(LONG))
    both = [row for row in ROWS if row in short and row in long]
    return {row: short[row] for row in both}, {row: long[row] for row in both}


def bleu(runs):
    return {row: [r["result"]["bleu"] for r in rs] for row, rs in runs.items()}


def state(a, b):
    """'>' where every seed of a is above every seed of b in test BLEU, '<' the other way, '~' within the spread."""
    return ">" if reports.beyond_spread(a, b, True) else "<" if reports.beyond_spread(b, a, True) else "~"


def verdicts(short, long):
    """[(a, b, at 8, at 24, held/flipped/closed/opened)] of the pairs apart at either budget, a the better where
    they first are apart; and [(a, b)] of the pairs within the spread at both."""
    at8, at24 = bleu(short), bleu(long)
    rows, apart, within = list(short), [], []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            before, after = state(at8[a], at8[b]), state(at24[a], at24[b])
            if before == after == "~":
                within.append((a, b))
                continue
            better, worse = a, b
            if (before if before != "~" else after) == "<":
                better, worse, before, after = b, a, FLIP[before], FLIP[after]
            word = ("held" if before == after else "closed" if after == "~" else "opened" if before == "~"
                    else "flipped")
            apart.append((better, worse, before, after, word))
    return apart, within


def end_of(rs):
    """(valid loss at the last validation, its fall per 1,000 updates over the last epoch), means over seeds."""
    ends = [(c[-1][2], (c[-2][2] - c[-1][2]) * 1000 / (c[-1][0] - c[-2][0])) for c in (r["curve"] for r in rs)]
    return tuple(sum(x) / len(ends) for x in zip(*ends))


def updates(runs):
    return sorted({r["curve"][-1][0] for rs in runs.values() for r in rs})


def translation_budgets():
    """Each row at both budgets: the paper's BLEU, test BLEU (mean, lowest-highest seed), seeds, and the
    validation loss at the end with its fall over the last epoch (how far from flat each run stopped)."""
    short, long = budgets()
    n8, n24 = (listed([f"{n:,}" for n in updates(runs)]) for runs in (short, long))
    lines = [f"| row | paper | test BLEU, 8 epochs ({n8} updates) | test BLEU, 24 epochs ({n24} updates) | seeds | "
             "valid loss at the end: 8 / 24 epochs | its fall per 1,000 updates over the last epoch: 8 / 24 epochs |",
             "|---|---|---|---|---|---|---|"]
    measures = paper.measures("mt")
    for row in short:
        (loss8, fall8), (loss24, fall24) = end_of(short[row]), end_of(long[row])
        seeds = "/".join(str(len(runs[row])) for runs in (short, long))
        lines.append(f"| {row} | {measures.get(row, '-')} | {reports.spread_text(bleu(short)[row])} | "
                     f"{reports.spread_text(bleu(long)[row])} | {seeds} | {loss8:.3f} / {loss24:.3f} | "
                     f"{fall8:.3f} / {fall24:.3f} |")
    commands = [records.load(record, "meta.json") for record in (*SHORT, LONG)]
    lines += ["", "Commands: " + "; ".join(f"`{meta['command']}` (commit {meta['commit'].split()[0]}, {meta['date']})"
                                            for meta in commands) + "."]
    return "\n".join(lines)


def same_start(short, long):
    """How many of the 24-epoch runs' validations up to the demo's budget equal the 8-epoch runs' of the same row
    and seed: the longer runs are the shorter ones trained on, not other draws."""
    equal = total = 0
    for row, rs in short.items():
        by_seed = {r["seed"]: r for r in long[row]}
        for r in rs:
            if r["seed"] in by_seed:
                later = {u: loss for u, _, loss in by_seed[r["seed"]]["curve"]}
                total += len(r["curve"])
                equal += sum(later.get(u) == loss for u, _, loss in r["curve"])
    return equal, total


WORDS = {">": "above", "<": "below", "~": "within the spread of"}


def with_bias(row):
    """Whether the row's encoder is EVA's layer with its relative position bias (its config's eva_rpe), as
    exact, local and the EVA rows are; softmax, LARA and Performer have none."""
    config = CONTROLS.get(row, (row, None))[0]
    with open(os.path.join(paper_table.REPO, "configs", paper_table.CONFIG["mt"].format(config) + ".yaml")) as f:
        model = yaml.safe_load(f)["model"]
    return model.get("encoder_attention") == "eva" and bool(model.get("eva_rpe"))


def by_bias(runs):
    """How many pairs (a row with the bias, one without) the rule orders, and how many with the bias above."""
    scores = bleu(runs)
    biased = [row for row in scores if with_bias(row)]
    states = [state(scores[a], scores[b]) for a in biased for b in scores if b not in biased]
    return biased, [row for row in scores if row not in biased], len(states), sum(s != "~" for s in states), \
        states.count(">")


def translation_reversal():
    """One sentence per ordering that the rule finds at either budget: held, flipped, closed or opened."""
    short, long = budgets()
    apart, within = verdicts(short, long)
    lines = [f"- {a} {WORDS[before]} {b} at 8 epochs, {WORDS[after]} it at 24: {word}."
             for a, b, before, after, word in apart]
    if within:
        lines.append("- Within the spread at both budgets: " + "; ".join(f"{a} and {b}" for a, b in within) + ".")
    lines += ["", bias_sentence(short, long)]
    fall8, fall24 = (sum(end_of(rs)[1] for rs in runs.values()) / len(runs) for runs in (short, long))
    lines += ["", f"Validation loss fell by {fall24:.3f} per 1,000 updates over the 24th epoch (the mean over the "
              f"rows) against {fall8:.3f} over the 8th."]
    equal, total = same_start(short, long)
    lines += ["", f"The 24-epoch runs pass through the 8-epoch runs: {equal} of the {total} validation losses of the "
              "8-epoch runs equal those of the 24-epoch run of the same row and seed at the same update."]
    return "By the rule of the tables, test BLEU:\n\n" + "\n".join(lines)


def bias_sentence(short, long):
    (biased, plain, pairs, apart8, up8), (_, _, _, apart24, up24) = by_bias(short), by_bias(long)
    return (f"Rows with EVA's relative position bias ({listed(biased)}) against rows without it ({listed(plain)}): "
            f"of the {pairs} pairs, {apart8} are apart at 8 epochs ({up8} with the row with the bias above) and "
            f"{apart24} at 24 ({up24} with the row with the bias above).")


def readme_translation_budgets():
    """The README's two lines: the rule's orderings at 24 epochs, and the pairs that the bias decides."""
    short, long = budgets()
    return f"- test BLEU at 24 epochs: {rule_sentence(bleu(long), higher=True)}.\n- {bias_sentence(short, long)}"


TABLES = {
    "translation-budgets": translation_budgets,
    "translation-reversal": translation_reversal,
    "readme-translation-budgets": readme_translation_budgets,
}
