"""Every figure of docs/results.md, drawn again from the records under benchmarks/results/ (nothing is rerun).

  python -m benchmarks.figures                 # all of them, into docs/img/
  python -m benchmarks.figures --only recall   # one of them (names: FIGURES)
"""

import argparse
import json
import os

from benchmarks import common
from benchmarks.experiments import long_context, paper_table, reports

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")


def record(*path):
    return os.path.join(RESULTS, *path)


def load(*path):
    with open(record(*path)) as f:
        return json.load(f)


def curve(*path):
    with open(record(*path, "curve.jsonl")) as f:
        return [json.loads(line) for line in f]


def cpu_speed(path):
    """Times from speed_c_loop.json; peak memory from speed_c_loop_memory.json, measured again once the layer's
    training peak was brought back to what its backward holds."""
    from benchmarks import speed

    peaks = {(r["N"], r["mechanism"]): r["peak_bytes"] for r in load("speed_c_loop_memory.json")["results"]}
    speed.plot([dict(r, peak_bytes=peaks.get((r["N"], r["mechanism"]))) for r in load("speed_c_loop.json")["results"]], path)


def approximation(path):
    from benchmarks import approximation as approx

    data = load("approximation.json")
    approx.plot(data["results"], argparse.Namespace(**data["settings"]), path)


def approximation_equal_cost(path):
    from benchmarks import approximation as approx

    approx.plot_equal_cost(load("approximation.json")["results"], path)


def mechanisms_speed(path):
    from benchmarks import mechanisms

    runs = sorted(name for name in os.listdir(record("mechanisms")) if name.startswith("speed_") and name.endswith(".json"))
    rows = [r for name in runs for r in load("mechanisms", name)["results"]]
    mechanisms.plot(sorted(rows, key=lambda r: (r["setting"] != "paper", r["N"])), path)


def decoding(path):
    from benchmarks import decoding as dec

    dec.plot(load("decoding.json")["results"], path)


def training(path):
    from benchmarks import training as train

    train.plot(load("training.json")["results"], path)


def gpu_speed(path):
    """Layer time against N at 65,536 tokens a call on an H200: N up to 8192 from the first part of the check,
    16384 and 32768 from the part that reran them."""
    rows = [r for name in ("correctness_speed_tokens.json", "speed_tokens_long_paper_configs_wmt.json")
            for r in load("gpu", "triton_check", name)["speed_tokens"]["rows"] if "layer_s" in r]
    fig, axes = common.figure(2, width=5.5)
    panels = [("bidirectional", ["sdpa", "eva", "eva+rpe+dropout", "projections"]),
              ("causal", ["sdpa-causal", "eva-causal", "eva-causal+rpe+dropout", "projections"])]
    for ax, (title, names) in zip(axes, panels):
        for name in names:
            points = sorted((r["N"], 1e3 * r["layer_s"]) for r in rows if r["mechanism"] == name)
            style = "--" if name == "projections" else ("-o" if name.startswith("eva") else "-s")
            ax.plot([p[0] for p in points], [p[1] for p in points], style, markersize=3, label=name)
        ax.set(xscale="log", yscale="log", xlabel="sequence length N (batch = 65,536 / N)",
               ylabel="layer forward + backward (ms)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{title}, bfloat16, d_model 512, 8 heads, NVIDIA H200", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    common.save_figure(fig, path)


def causal_lm(path):
    from benchmarks import lm_tables

    lm_tables.plot(path)


def masked_lm(path):
    from benchmarks import mlm_table

    mlm_table.plot(path)


def baselines_small(task, since=0):
    """valid_small perplexity against CPU time and updates of every row of baselines_small/, as the harness
    (scripts/long_context.py) plots its own report; from `since` updates on, where the rows' gaps are readable."""

    def draw(path):
        rows = long_context.row_results(record("baselines_small"), task)
        curves = {row if seed == 1 else f"{row} seed {seed}": [p for p in r["curve"] if p["updates"] >= since]
                  for (row, seed), r in rows.items()}
        budget = max(r["budget"] for r in rows.values())
        name = "causal LM" if task == "lm" else "masked LM"
        start = f", from {since} updates" if since else ""
        reports.plot_perplexity(curves, path, f"{name}, {budget:g} CPU min a row{start}")

    return draw


def translation_table(path):
    """Validation loss against updates and CPU time of every run of the translation table at the sample's scale,
    as scripts/paper_table.py plots its own report."""
    reports.plot_losses(paper_table.collect("mt", record("translation_table")), path, "WMT14 rows, sample scale", "CPU")


def translation_budgets(path):
    """Validation loss against updates of the translation rows trained for 24 epochs, with the demo's 8 epochs
    marked: whether the curves have flattened where the table reads them."""
    runs = paper_table.collect("mt", record("translation_table_24_epochs"))
    fig, axes = common.figure(1, width=8.0, height=5.0)
    ax = axes[0]
    for i, (row, rs) in enumerate(runs.items()):
        for j, r in enumerate(rs):
            ax.plot([p[0] for p in r["curve"]], [p[2] for p in r["curve"]], "-" if j == 0 else "--",
                    color=f"C{i % 10}", label=row if j == 0 else None, linewidth=1.2)
    demo = max(p[0] for p in paper_table.collect("mt", record("translation_table"))["softmax"][0]["curve"])
    ax.axvline(demo, color="grey", linestyle=":", linewidth=1)
    ax.text(demo, 0.98, " the demo's 8 epochs", transform=ax.get_xaxis_transform(), va="top", fontsize=8,
            color="grey")
    ax.set(xlabel="updates", ylabel="validation loss (base 2, label-smoothed)", ylim=(5.0, 7.5),
           title="Translation rows at the sample's scale, 24 epochs (dashed: seeds 2 and 3)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    common.save_figure(fig, path)


def mlm_table(path):
    """valid_small perplexity against CPU time of every run of the masked-LM table at the sample's scale, with the
    plateau (predicting each masked token by its frequency) and 3/4 of it."""
    rows = long_context.row_results(record("mlm_table"), "mlm")
    plateau = load("mlm_table", "frequency_v256.json")["perplexity"]
    fig, axes = common.figure(1, width=8.0, height=5.0)
    ax = axes[0]
    colours = {}
    for (row, seed), r in rows.items():
        colour = colours.setdefault(row, f"C{len(colours) % 10}")
        ax.plot([p["cpu_s"] / 60 for p in r["curve"]], [p["ppl"] for p in r["curve"]], "-" if seed == 1 else "--",
                color=colour, label=row if seed == 1 else None, linewidth=1.2)
    for level, text in ((plateau, "plateau (frequency)"), (0.75 * plateau, "3/4 of the plateau")):
        ax.axhline(level, color="grey", linestyle=":", linewidth=1)
        ax.text(0.01, level, text, transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="grey")
    ax.set(xlabel="training CPU minutes (validation included)", ylabel="valid_small perplexity (masked tokens)",
           title="Masked LM at the sample's scale, 2 layers of 128 (dashed: seed 2)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    common.save_figure(fig, path)


RECALL_ROWS = [  # label, record, row, colour
    ("exact", "recall_10000_updates", "exact", "tab:blue"),
    ("exact, seed 2", "recall_by_chunk_size", "exact-seed2", "tab:blue"),
    ("EVA, chunks of 4", "recall_10000_updates", "eva4", "tab:orange"),
    ("EVA, chunks of 4, seed 2", "recall_by_chunk_size", "eva4-seed2", "tab:orange"),
    ("EVA, chunks of 8", "recall_by_chunk_size", "eva8", "tab:red"),
    ("EVA, chunks of 16", "recall_by_chunk_size", "eva16", "tab:purple"),
    ("local (window 64)", "recall_7000_updates", "local", "tab:green"),
]


def recall(path):
    fig, axes = common.figure(1, width=7.0, height=4.5)
    ax = axes[0]
    for label, folder, row, colour in RECALL_ROWS:
        points = curve(folder, row)
        ax.plot([r["updates"] for r in points], [r["ppl"] for r in points], "--" if "seed 2" in label else "-",
                color=colour, label=label)
    ax.set(yscale="log", xlabel="updates (8 blocks of 512)", ylabel="valid perplexity (whole blocks)",
           title="Recall blocks: the second half repeats the first, beyond the window of 64")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    common.save_figure(fig, path)


FIGURES = {  # name: (draw, file under docs/img)
    "cpu_speed": (cpu_speed, "speed_c_loop.png"),
    "approximation": (approximation, "approximation.png"),
    "approximation_equal_cost": (approximation_equal_cost, "approximation_equal_cost.png"),
    "mechanisms_speed": (mechanisms_speed, "mechanisms_speed.png"),
    "decoding": (decoding, "decoding.png"),
    "training": (training, "training.png"),
    "gpu_speed": (gpu_speed, "gpu_h200_layer.png"),
    "causal_lm": (causal_lm, "causal_lm_two_seeds.png"),
    "masked_lm": (masked_lm, "mlm_h200_warmup.png"),
    "recall": (recall, "recall_by_chunk_size.png"),
    "baselines_small_lm": (baselines_small("lm", since=300), "baselines_small_lm.png"),
    "baselines_small_mlm": (baselines_small("mlm"), "baselines_small_mlm.png"),
    "translation_table": (translation_table, "translation_table_sample.png"),
    "mlm_table": (mlm_table, "mlm_table_sample.png"),
    "translation_budgets": (translation_budgets, "translation_24_epochs_sample.png"),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "img"), help="folder for the PNG files")
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="draw only these figures")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for name in args.only or FIGURES:
        draw, filename = FIGURES[name]
        draw(os.path.join(args.out, filename))
        written.append(os.path.join(args.out, filename))
        print(written[-1])
    return written


if __name__ == "__main__":
    main()
