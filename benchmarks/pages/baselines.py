"""The paper's baselines beside EVA: their speed and memory (the mechanisms' record), and their learning at small
scale (scripts/long_context.py's records, read by the harness's own reader): its tables, the rows as sentences,
and the orderings by the rule."""

from benchmarks.experiments import long_context
from benchmarks.pages import records
from benchmarks.pages.rule import rule_sentence
from benchmarks.pages.words import BASELINE_NAMES


def mechanisms_speed(setting, lengths):
    """One row a mechanism: time and peak memory against EVA's in the same run, at each length."""

    def render():
        rows = [r for name in records.names("mechanisms")
                if name.startswith(f"speed_{setting}") and name.endswith(".json")
                for r in records.load("mechanisms", name)["results"]]  # each run holds EVA, which its ratios are against
        names = list(dict.fromkeys(r["mechanism"] for r in rows))
        shown = [n for n in lengths if any(r["N"] == n for r in rows)]
        cells = {(r["mechanism"], r["N"]): r for r in rows}
        head = " | ".join(f"N = {n}: time, memory" for n in shown)
        lines = [f"| {setting}: mechanism (MACs/token at N = {shown[0]}) | {head} |", "|---" * (len(shown) + 1) + "|"]
        for name in names:
            first = cells.get((name, shown[0]))
            cost = f" ({first['macs_per_token'] / 768:.0f} D)" if first else ""
            values = [f"{c['time_vs_eva']:.2f}x, {c['memory_vs_eva']:.2f}x" if (c := cells.get((name, n))) else "-"
                      for n in shown]
            lines.append(f"| {name}{cost} | " + " | ".join(values) + " |")
        return "\n".join(lines)

    return render


def baselines_small(task, record="baselines_small", tables=3):
    """The paper's baselines learning beside EVA at small scale (a record of scripts/long_context.py's rows): the
    first `tables` tables of the harness's report for the task (each row at the end of its CPU-time budget, then
    valid perplexity at equal updates and at equal CPU time), rendered by the harness's own code from the record."""

    def render():

        rows = long_context.row_results(records.folder(record), task)
        lines = long_context.task_tables(rows, task, 256)
        blank = [i for i, line in enumerate(lines) if not line and i > 2]  # each table ends at a blank line
        return "\n".join(lines[:blank[2 * tables - 2]]).strip()

    return render


def baselines_summary(task, record="baselines_small"):
    """The rows of a baselines record in order, as sentences: at the end of the CPU-time budget (validation and
    test), at the most updates every run reached, and the updates each made; with two seeds, their largest spread."""

    def render():

        rows = {}
        for (row, _), r in long_context.row_results(records.folder(record), task).items():
            rows.setdefault(row, []).append(r)

        def mean(xs):
            return sum(xs) / len(xs)

        def ordered(values, fmt="{:.1f}", reverse=False):
            return ", ".join(f"{BASELINE_NAMES.get(row, row)} {fmt.format(v)}"
                             for row, v in sorted(values.items(), key=lambda item: item[1], reverse=reverse))

        runs = [r for rs in rows.values() for r in rs]
        common = max(u for u in {p["updates"] for p in runs[0]["curve"]}
                     if all(any(p["updates"] == u for p in r["curve"]) for r in runs))

        def at(r, u):
            return next(p["ppl"] for p in r["curve"] if p["updates"] == u)

        test_key = "256" if task == "lm" else "test"
        budget = mean([r["budget"] for r in runs])
        end = {row: mean([r["last"]["ppl"] for r in rs]) for row, rs in rows.items()}
        test = {row: mean([r["test"][test_key] for r in rs]) for row, rs in rows.items()}
        equal = {row: mean([at(r, common) for r in rs]) for row, rs in rows.items()}
        updates = {row: mean([r["last"]["updates"] for r in rs]) for row, rs in rows.items()}
        seeds = max(len(rs) for rs in rows.values())
        of = f" (the mean of {seeds} seeds)" if seeds > 1 else " (one seed)"
        lines = [f"- After {budget:g} CPU minutes{of}, valid_small perplexity: {ordered(end)}; test perplexity"
                 f"{' at context 256' if task == 'lm' else ' on the masked tokens'}: {ordered(test)}.",
                 f"- At {common:,} updates, the most that every run reached: {ordered(equal)}.",
                 f"- Updates in the {budget:g} CPU minutes: {ordered(updates, '{:.0f}', reverse=True)}."]
        if seeds > 1:
            pairs = [rs for rs in rows.values() if len(rs) == 2]
            spread_end = max(abs(a["last"]["ppl"] - b["last"]["ppl"]) for a, b in pairs)
            spread_equal = max(abs(at(a, common) - at(b, common)) for a, b in pairs)
            lines.append(f"- The largest gap between a row's two seeds: {spread_end:.1f} at the end of the budget, "
                         f"{spread_equal:.1f} at {common:,} updates.")
        return "\n".join(lines)

    return render


def baselines_orderings(task, record="baselines_small"):
    """A baselines record by the rule: at the end of the CPU-time budget (validation and test), at equal CPU time
    (each half budget) and at the most updates every run reached."""

    def render():

        rows = {}
        for (row, _), r in long_context.row_results(records.folder(record), task).items():
            rows.setdefault(BASELINE_NAMES.get(row, row), []).append(r)
        runs = [r for rs in rows.values() for r in rs]
        common = max(u for u in {p["updates"] for p in runs[0]["curve"]}
                     if all(any(p["updates"] == u for p in r["curve"]) for r in runs))
        budget = min(r["budget"] for r in runs)
        test_key = "256" if task == "lm" else "test"

        def scores(value):
            """{row: [value of each seed]}; a seed without a value there (its curve starts later) left out."""
            found = {row: [v for v in map(value, rs) if v is not None] for row, rs in rows.items()}
            return {row: values for row, values in found.items() if values}

        minutes = [budget * k / 4 for k in (1, 2, 3)]
        timed = [(f"{m:g} CPU minute{'' if m == 1 else 's'}", scores(lambda r, m=m: long_context.ppl_at_cpu(r["curve"], m * 60)))
                 for m in minutes]
        lines = [f"- By the rule of the tables (every seed of one row below every seed of the other), valid_small "
                 f"perplexity after {budget:g} CPU minutes: {rule_sentence(scores(lambda r: r['last']['ppl']))}.",
                 f"- Test perplexity{' at context 256' if task == 'lm' else ' on the masked tokens'} after {budget:g} "
                 f"CPU minutes: {rule_sentence(scores(lambda r: r['test'][test_key]))}.",
                 *(f"- At {label} (valid_small): {rule_sentence(v)}." for label, v in timed),
                 f"- At {common:,} updates (valid_small): "
                 f"{rule_sentence(scores(lambda r: next(p['ppl'] for p in r['curve'] if p['updates'] == common)))}."]
        return "\n".join(lines)

    return render


TABLES = {
    "mechanisms-speed-paper": mechanisms_speed("paper", (1024, 4096, 16384)),
    "mechanisms-speed-equal-cost": mechanisms_speed("equal-cost", (1024, 4096, 16384)),
    "baselines-small-lm": baselines_small("lm"),
    "baselines-small-mlm": baselines_small("mlm"),
    "rpe-table-lm": baselines_small("lm", record="rpe_table_lm", tables=1),
    "baselines-summary-lm": baselines_summary("lm"),
    "baselines-summary-mlm": baselines_summary("mlm"),
    "rpe-table-summary": baselines_summary("lm", record="rpe_table_lm"),
    "baselines-orderings-lm": baselines_orderings("lm"),
    "baselines-orderings-mlm": baselines_orderings("mlm"),
}
