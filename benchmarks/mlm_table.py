"""The masked LM on an H200: valid_small perplexity at equal updates, the warm-up 1000 rows (from their progress
logs, one decimal) beside the warm-up 100 rows of benchmarks/results/mlm_h200_eva_exact and mlm_h200_local.

  python -m benchmarks.mlm_table
"""

import json
import os
import re

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results")
HERE = os.path.join(RESULTS, "mlm_h200_warmup1000")
UPDATES = [500, 1000, 1500, 2000, 2500, 3000, 3250, 3500, 4000, 4500, 4750]


def from_progress(path):
    """{updates: ppl} from long_context.py's progress lines (rounded to 0.1)."""
    found = (re.search(r"(\d+) updates .*valid ppl ([0-9.]+)", line) for line in open(path))
    return {int(m[1]): float(m[2]) for m in found if m}


def from_curve(record, row):
    return {r["updates"]: r["ppl"] for r in map(json.loads, open(os.path.join(RESULTS, record, row, "curve.jsonl")))}


ROWS = {
    "exact s1 w100 (run 1)": from_curve("mlm_h200_eva_exact", "mlm-exact"),
    "exact s1 w100 (run 2)": from_curve("mlm_h200_local", "mlm-exact"),
    "exact s2 w100": from_curve("mlm_h200_eva_exact", "mlm-exact-seed2"),
    "eva s1 w100": from_curve("mlm_h200_eva_exact", "mlm-eva-32-16"),
    "eva s2 w100": from_curve("mlm_h200_eva_exact", "mlm-eva-32-16-seed2"),
    "local s1 w100": from_curve("mlm_h200_local", "mlm-local-32"),
    "local s2 w100": from_curve("mlm_h200_local", "mlm-local-32-seed2"),
    "exact s1 w1000": from_progress(os.path.join(HERE, "progress_exact_6.5.log")),
    "eva s1 w1000": from_progress(os.path.join(HERE, "progress_eva_6.5.log")),
}


def plot(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colour = {"exact": "tab:blue", "eva": "tab:orange", "local": "tab:green"}
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, curve in ROWS.items():
        long = "w1000" in name
        u = sorted(x for x in curve if x <= 5000)
        ax.plot(u, [curve[x] for x in u], color=colour[name.split()[0]], lw=2.2 if long else 1,
                ls="-" if long else "--", label=name)
    ax.set(yscale="log", ylim=(2.9, 20), xlabel="updates (128 blocks of 512)",
           ylabel="valid_small perplexity (masked tokens)",
           title="Masked LM on an H200: warm-up 100 (dashed) against 1000 (solid)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    print("| row | " + " | ".join(map(str, UPDATES)) + " |\n" + "|---" * (len(UPDATES) + 1) + "|")
    for name, curve in ROWS.items():
        print(f"| {name} | " + " | ".join(f"{curve[u]:.2f}" if u in curve else "-" for u in UPDATES) + " |")


if __name__ == "__main__":
    main()
