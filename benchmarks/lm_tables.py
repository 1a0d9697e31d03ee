"""The causal LM at 2,000 pieces: two seeds each of exact, EVA and local attention, at equal updates, at equal CPU
time and on test, printed as docs/results.md's tables from the records (exact's rows and the CPU-time budget of
benchmarks/results/causal_lm_v2k, EVA's and local's from causal_lm_v2k_180min).

  python -m benchmarks.lm_tables
"""

import json
import os
import re

from benchmarks.experiments.reports import ppl_at_cpu  # the report's own interpolation between validations

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")

ROWS = {
    "exact s1": os.path.join(RESULTS, "causal_lm_v2k", "exact"),
    "exact s2": os.path.join(RESULTS, "causal_lm_v2k", "exact-seed2"),
    "EVA s1": os.path.join(RESULTS, "causal_lm_v2k_180min", "eva"),
    "EVA s2": os.path.join(RESULTS, "causal_lm_v2k_180min", "eva-seed2"),
    "local s1": os.path.join(RESULTS, "causal_lm_v2k_180min", "local"),
    "local s2": os.path.join(RESULTS, "causal_lm_v2k_180min", "local-seed2"),
}


def curves():
    """{row: its validations}, read from the record when asked (benchmarks/pages/learning.py notes these records
    for the pages' provenance lines)."""
    return {name: [json.loads(line) for line in open(os.path.join(d, "curve.jsonl"))] for name, d in ROWS.items()}


UPDATES = [4000, 8000, 12000, 16000, 20000, 24000]
MINUTES = [30, 60, 90, 120, 150, 180]


def at_updates(curve, updates):
    return next((r["ppl"] for r in curve if r["updates"] == updates), None)


def at_minutes(curve, minutes):
    return ppl_at_cpu(curve, minutes * 60)


def test_at(row_dir, minutes):
    """{context: ppl} after `minutes` of CPU time: kept as test_ppl_XXmin.json, or test_ppl.json at the last budget."""
    kept = os.path.join(row_dir, f"test_ppl_{minutes}min.json")
    if os.path.exists(kept):
        return json.load(open(kept))
    budget = float(re.search(r"--stop-time-hours (\S+)", open(os.path.join(row_dir, "command.txt")).read())[1])
    last = os.path.join(row_dir, "test_ppl.json")
    return json.load(open(last)) if round(budget * 60) == minutes and os.path.exists(last) else None


def span(values, fmt, unit=""):
    if not values:
        return "-"
    return fmt(min(values)) + unit if len(values) == 1 else f"{fmt(min(values))}-{fmt(max(values))}{unit}"


def spread(xs):
    return f"{abs(xs[0] - xs[1]):.2f}" if len(xs) == 2 else "-"


def percent(x):
    return f"{100 * x:.0f}"


def seeds(v, row):
    return [x for name, x in v.items() if name.split()[0] == row and x is not None]


def share(exact, eva, local):
    """EVA's share of local attention's gap to exact attention."""
    return (local - eva) / (local - exact)


def comparison(v):
    """Seed spreads; local minus EVA over the pairings of seeds; EVA's share of local's gap to exact, from the
    means and over every choice of one seed a row. A share is given only where every exact seed is below every
    EVA and local seed, and its mean only where every row has two seeds."""
    exact, eva, local = seeds(v, "exact"), seeds(v, "EVA"), seeds(v, "local")
    below = exact and all(x < y for x in exact for y in eva + local)
    shares = [share(x, e, lo) for x in exact for e in eva for lo in local] if below else []
    complete = below and len(exact) == len(eva) == len(local) == 2
    mean = share(*(sum(xs) / 2 for xs in (exact, eva, local))) if complete else None
    return [spread(exact), spread(eva), spread(local), span([lo - e for e in eva for lo in local], lambda x: f"{x:.2f}"),
            "-" if mean is None else percent(mean) + "%", span(shares, percent, "%")]


def header(label):
    head = [label, *ROWS, "exact spread", "EVA spread", "local spread", "local minus EVA", "EVA's share (means)",
            "EVA's share (seeds)"]
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")


def table(label, points, value):
    header(label)
    for p in points:
        v = {name: value(curve, p) for name, curve in curves().items()}
        cells = [f"{p:,}", *("-" if x is None else f"{x:.2f}" for x in v.values()), *comparison(v)]
        print("| " + " | ".join(cells) + " |")
    print()


def plot(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {"exact": "tab:blue", "EVA": "tab:orange", "local": "tab:green"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for name, curve in curves().items():
        style = dict(color=colour[name.split()[0]], ls="--" if name.endswith("s2") else "-", label=name)
        axes[0].plot([r["updates"] for r in curve], [r["ppl"] for r in curve], **style)
        axes[1].plot([r["cpu_s"] / 60 for r in curve], [r["ppl"] for r in curve], **style)
    axes[0].set(xlabel="updates (8 blocks of 512)", ylabel="valid_small perplexity", ylim=(27, 60))
    axes[1].set(xlabel="training CPU minutes (one thread)", xlim=(0, 180))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend()
    fig.suptitle("Causal LM on doc_en, 2,000 pieces, blocks of 512: exact, EVA (window 128, chunks of 8), local")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    table("updates", UPDATES, at_updates)
    table("CPU minutes", MINUTES, at_minutes)
    print("Test perplexity, context 0 / 256 (the last columns compare context 256):\n")
    header("CPU minutes")
    for m in (60, 120, 180):
        tests = {name: test_at(d, m) for name, d in ROWS.items()}
        cells = ["-" if t is None else f"{t['0']:.2f} / {t['256']:.2f}" for t in tests.values()]
        at256 = {name: None if t is None else t["256"] for name, t in tests.items()}
        print(f"| {m} | " + " | ".join(cells + comparison(at256)) + " |")


if __name__ == "__main__":
    main()
