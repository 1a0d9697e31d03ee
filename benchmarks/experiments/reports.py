"""The harnesses' reports: tables of rows over seeds (the mean, each seed, the seeds' range), the orderings beyond
the seeds' spread, and the curves' figures."""

import math

from benchmarks import paper

from .processes import log

# The paper's numbers (benchmarks/paper.json): {table: {row: the table's measure, None where none is quoted}}
PAPER = {table: paper.measures(table) for table in ("mt", "lm", "mlm")}
METRIC = {"mt": ("test BLEU (compound-split)", True), "lm": ("test perplexity, context 480", False),
          "mlm": ("validation perplexity", False)}  # (what the table compares, higher is better)

# ---------------------------------------------------------------- the long-context rows (perplexity curves)

def load_text(load):
    return "-" if load is None else f"{load['start'][0]:.2f} / {load['end'][0]:.2f}"


def seeds_text(values, fmt="{:.2f}"):
    """One number per row: the mean over seeds, followed by each seed's value when there are several;
    - when a seed has none."""
    if None in values:
        return "-"
    mean = fmt.format(sum(values) / len(values))
    return mean if len(values) == 1 else f"{mean} ({', '.join(fmt.format(v) for v in values)})"


def ppl_at_cpu(curve, cpu_s):
    """valid perplexity at `cpu_s` CPU seconds, interpolated between validations (linear in log perplexity);
    None outside the curve."""
    for p, q in zip(curve, curve[1:]):
        if p["cpu_s"] <= cpu_s <= q["cpu_s"]:
            t = (cpu_s - p["cpu_s"]) / ((q["cpu_s"] - p["cpu_s"]) or 1)
            return math.exp((1 - t) * math.log(p["ppl"]) + t * math.log(q["ppl"]))
    return None


def spaced(values, most=8):
    """At most `most` of a sorted list, evenly spaced, the last always included."""
    if len(values) <= most:
        return values
    return [values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)]


def task_tables(rows, task, half, clock="CPU"):
    """Markdown lines: the rows at the end of their budget (equal CPU time), valid_small perplexity at equal
    updates and at equal CPU time; a row of several seeds shows their mean, then each seed's value. A row whose
    seeds ran to different budgets (one resumed further) is one line per budget, "row (B min)". Beside each row's
    name, its attention's multiply-adds per token in units of D (- : its command does not say)."""
    budgets = {}
    for (row, seed), r in rows.items():
        budgets.setdefault(row, set()).add(r["budget"])
    by_row = {}
    for (row, seed), r in rows.items():
        name = row if len(budgets[row]) == 1 else f"{row} ({r['budget']:g} min)"
        by_row.setdefault(name, []).append(r)
    cost = {row: "/".join(dict.fromkeys("-" if r["cost"] is None else f"{r['cost']:.0f}" for r in rs))
            for row, rs in by_row.items()}
    test = f"test ppl, context 0 | context {half} | lower by" if task == "lm" else "test ppl (masked tokens)"
    lines = [f"At the end of each row's {clock}-time budget:", "",
             f"| row | MACs/token (D) | seeds | {clock} min budget | updates | {clock} s | valid_small ppl | {test} | load |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if task == "lm" else "")]
    for row, rs in by_row.items():
        cells = [row, cost[row], len(rs), seeds_text([r["budget"] for r in rs], "{:g}"),
                 seeds_text([r["last"]["updates"] for r in rs], "{:.0f}"), seeds_text([r["last"]["cpu_s"] for r in rs], "{:.0f}"),
                 seeds_text([r["last"]["ppl"] for r in rs])]
        if task == "lm":
            ctx0, ctx = [r["test"]["0"] for r in rs], [r["test"][str(half)] for r in rs]
            cells += [seeds_text(ctx0), seeds_text(ctx), seeds_text([100 * (1 - b / a) for a, b in zip(ctx0, ctx)], "{:.1f}%")]
        else:
            cells.append(seeds_text([r["test"]["test"] for r in rs]))
        cells.append(", ".join(load_text(r["load"]) for r in rs))
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    # validations that at least two runs share and that no run skipped: a run's off-grid points (its last, an
    # epoch's end) are its own; "-" where a run had stopped
    seen = [{p["updates"] for p in r["curve"]} - {0} for r in rows.values()]
    updates = sorted(u for u in set().union(*seen) if sum(u in points for points in seen) >= 2
                     and all(u in points for points in seen if points and min(points) <= u <= max(points)))
    if updates:
        columns = spaced(updates)
        lines += ["", "valid_small perplexity at equal updates:", "",
                  "| row | MACs/token (D) | " + " | ".join(map(str, columns)) + " |", "|---|---|" + "---|" * len(columns)]
        for row, rs in by_row.items():
            values = [[next((p["ppl"] for p in r["curve"] if p["updates"] == u), None) for r in rs] for u in columns]
            lines.append(f"| {row} | {cost[row]} | " + " | ".join(seeds_text(v) for v in values) + " |")
    # a quarter, half, ... of the largest budget, and each smaller budget (a run ends just past its budget)
    ends = {r["budget"] for r in rows.values()}
    minutes = sorted({round(max(ends) * f, 1) for f in (0.25, 0.5, 0.75, 1.0)} | ends - {0})
    lines += ["", f"valid_small perplexity at equal {clock} time (minutes; interpolated between validations):", "",
              "| row | MACs/token (D) | " + " | ".join(f"{m:g}" for m in minutes) + " |",
              "|---|---|" + "---|" * len(minutes)]
    for row, rs in by_row.items():
        lines.append(f"| {row} | {cost[row]} | "
                     + " | ".join(seeds_text([ppl_at_cpu(r["curve"], m * 60) for r in rs]) for m in minutes) + " |")
    lines += ["", f"Commands (run by `python -m benchmarks.experiments.worker`, which counts {clock} time):", ""]
    lines += [f"- {row}, seed {seed}: `{r['command']}`" for (row, seed), r in rows.items()]
    return lines + [""]


def plot_perplexity(curves, path, title, ylabel="valid_small perplexity", clock="CPU"):
    """Each curve against training time (left) and updates (right); seeds of a row share a colour."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4), sharey=True)
    rows = list(dict.fromkeys(label.split(" seed ")[0] for label in curves))
    # matplotlib's ten colours, or twenty (tab20) for more rows: every row its own
    palette = [f"C{i}" for i in range(10)] if len(rows) <= 10 else [plt.get_cmap("tab20")(i % 20) for i in range(len(rows))]
    colours = dict(zip(rows, palette))
    for label, points in curves.items():
        row = label.split(" seed ")[0]
        colour = colours[row]
        style = "-" if label == row else "--"
        for ax, x in zip(axes, ([p["cpu_s"] / 60 for p in points], [p["updates"] for p in points])):
            ax.plot(x, [p["ppl"] for p in points], style, color=colour, marker=".", label=label)
    axes[0].set(xlabel=f"training {clock} time (min)", ylabel=ylabel, yscale="log", title=title)
    axes[1].set(xlabel="updates", title=title)
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the curves, not over them
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------- the paper's tables (runs over seeds)


def score(table, result):
    return result["bleu"] if table == "mt" else result["ppl"]["480"] if table == "lm" else result["ppl"]


def spread_text(values):
    """The mean, and the lowest and highest value in brackets where they differ."""
    mean = sum(values) / len(values)
    return f"{mean:.2f}" if min(values) == max(values) else f"{mean:.2f} ({min(values):.2f}-{max(values):.2f})"


def beyond_spread(a, b, higher):
    """The rule of every ordering on the pages: the values of row a (one a seed) are all better than those of b
    (its worst seed better than b's best); a row of one seed has no spread and is never apart."""
    if min(len(a), len(b)) < 2:
        return False
    return min(a) > max(b) if higher else max(a) < min(b)


def orderings(table, runs, measure=None):
    """Sentences: the rows by their mean; where two rows or more have several seeds, every pair of them whose
    seeds' ranges do not overlap (the one row's worst seed better than the other's best), then those that do; a
    row of one seed has no spread, so no pair with it is ordered (a last sentence names those pairs). `measure`
    names what the scores are where it is not the table's own metric."""
    name, higher = METRIC[table]
    name = measure or name
    scores = {row: [score(table, r["result"]) for r in rs] for row, rs in runs.items()}
    mean = {row: sum(v) / len(v) for row, v in scores.items()}
    order = sorted(mean, key=lambda row: -mean[row] if higher else mean[row])
    apart, close, alone = [], [], []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if min(len(scores[a]), len(scores[b])) < 2:
                alone.append(f"{a} ? {b}")
                continue
            separated = beyond_spread(scores[a], scores[b], higher)
            (apart if separated else close).append(f"{a} > {b}" if separated else f"{a} ~ {b}")
    lines = [f"By the mean {name} over seeds: " + ", ".join(f"{row} {mean[row]:.2f}" for row in order) + "."]
    if apart or close:
        lines += ["Apart by more than the seeds' spread (every seed of the first better than every seed of the "
                  "second): " + (", ".join(apart) if apart else "none") + ".",
                  "Within the spread (seed ranges overlap): " + (", ".join(close) if close else "none") + "."]
    if alone:
        lines.append("Not ordered (a row of one seed has no spread; give more --seeds): " + ", ".join(alone) + ".")
    return lines


def table_lines(table, scale, runs):
    """The table (one line a row: the paper's number, the mean over seeds with their range, parameters, updates
    and training time) and the orderings, as Markdown lines."""
    name, _ = METRIC[table]
    clock = "CPU" if scale == "sample" else "wall-clock"
    sacre = ["sacreBLEU"] if table == "mt" else []
    head = ["row", "paper", name, *sacre, "seeds", "parameters", "updates", f"{clock} min"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row, rs in runs.items():
        paper = PAPER[table].get(row)
        cells = [row, "-" if paper is None else str(paper), spread_text([score(table, r["result"]) for r in rs])]
        if sacre:
            values = [r["result"]["sacrebleu"] for r in rs]
            cells.append("-" if None in values else spread_text(values))
        params = {r["params"] for r in rs}
        ends = [r["curve"][-1] for r in rs if r["curve"]]
        complete = len(ends) == len(rs)
        cells += [len(rs), ", ".join(f"{p:,}" for p in sorted(params)) if None not in params else "-",
                  spread_text([e[0] for e in ends]).replace(".00", "") if complete else "-",  # whole updates
                  spread_text([e[1] / 60 for e in ends]) if complete else "-"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + (["", *(f"- {line}" for line in orderings(table, runs))] if runs else [])


def plot_losses(runs, path, title, clock):
    """Validation loss against updates (left) and training time (right); a row's seeds share a colour."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    if not runs:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4), sharey=True)
    for i, (row, rs) in enumerate(runs.items()):
        for j, r in enumerate(rs):
            for ax, x in zip(axes, (0, 1)):
                ax.plot([p[x] / (1 if x == 0 else 60) for p in r["curve"]], [p[2] for p in r["curve"]],
                        "-" if j == 0 else "--", color=f"C{i % 10}", marker=".", label=row if j == 0 else None)
    axes[0].set(xlabel="updates", ylabel="validation loss (base 2)", title=title)
    axes[1].set(xlabel=f"training {clock} time (min)", title=title)
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)


def runs_text(runs):
    """`softmax (seeds 1, 2), eva16 (seed 1)`: the rows and seeds that the table is made of."""
    def seeds(rs):
        numbers = ", ".join(str(r["seed"]) for r in rs)
        return f"seed {numbers}" if len(rs) == 1 else f"seeds {numbers}"

    return ", ".join(f"{row} ({seeds(rs)})" for row, rs in runs.items()) or "none finished"
