"""Issue 19, step 2 at 2,000 pieces: two seeds of EVA and of local attention against exact attention (one seed),
at equal updates, at equal CPU time and on test, from the records (exact is lm512_v2k's row).

  python table.py [PLOT.png]
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
from long_context import ppl_at_cpu  # noqa: E402  (the report's own interpolation between validations)

ROWS = {
    "exact": os.path.join(HERE, "..", "lm512_v2k", "exact"),
    "EVA s1": os.path.join(HERE, "eva"),
    "EVA s2": os.path.join(HERE, "eva-seed2"),
    "local s1": os.path.join(HERE, "local"),
    "local s2": os.path.join(HERE, "local-seed2"),
}
CURVES = {name: [json.loads(line) for line in open(os.path.join(d, "curve.jsonl"))] for name, d in ROWS.items()}
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


def comparison(v):
    """Seed spreads, local minus EVA and EVA's share of local's gap to exact, over the four pairings of seeds.
    The share is given only where exact attention is below every EVA and local seed."""
    eva = [x for x in (v["EVA s1"], v["EVA s2"]) if x is not None]
    local = [x for x in (v["local s1"], v["local s2"]) if x is not None]
    exact = v["exact"]
    below = exact is not None and all(exact < x for x in eva + local)
    shares = [(lo - e) / (lo - exact) for e in eva for lo in local] if below else []
    return [spread(eva), spread(local), span([lo - e for e in eva for lo in local], lambda x: f"{x:.2f}"),
            span(shares, lambda x: f"{100 * x:.0f}", "%")]


def header(label):
    head = [label, *ROWS, "EVA spread", "local spread", "local minus EVA", "EVA's share"]
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|")


def table(label, points, value):
    header(label)
    for p in points:
        v = {name: value(curve, p) for name, curve in CURVES.items()}
        cells = [f"{p:,}", *("-" if x is None else f"{x:.2f}" for x in v.values()), *comparison(v)]
        print("| " + " | ".join(cells) + " |")
    print()


def plot(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {"exact": "tab:blue", "EVA": "tab:orange", "local": "tab:green"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for name, curve in CURVES.items():
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


if __name__ == "__main__":
    table("updates", UPDATES, at_updates)
    table("CPU minutes", MINUTES, at_minutes)
    print("Test perplexity, context 0 / 256 (the last columns compare context 256):\n")
    header("CPU minutes")
    for m in (60, 120, 180):
        tests = {name: test_at(d, m) for name, d in ROWS.items()}
        cells = ["-" if t is None else f"{t['0']:.2f} / {t['256']:.2f}" for t in tests.values()]
        at256 = {name: None if t is None else t["256"] for name, t in tests.items()}
        print(f"| {m} | " + " | ".join(cells + comparison(at256)) + " |")
    if len(sys.argv) > 1:
        plot(sys.argv[1])
