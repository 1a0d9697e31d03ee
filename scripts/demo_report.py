#!/usr/bin/env python
"""The demo's results table and training-curve plot, from the files the demo's runs left in --out.

    python scripts/demo_report.py --out outputs/demo [--wall-seconds N]

Reads fairseq's json log records from checkpoints/*/hydra_train.log, the BLEU files and translations of
scripts/eval_wmt14.sh and the ppl.tsv of scripts/eval_lm.sh; prints a Markdown table, writes it to
results.md, the numbers and the first test translations to results.json, and the curves (loss in base 2
against updates) to curves.png.
"""

import argparse
import json
import os
import re

from benchmarks.experiments.evaluations import read_bleu, read_ppl

TRANSLATION = [("mt_eva", "EVA (abs(E) = 8, C = 4)"), ("mt_softmax", "softmax")]
LM = [("lm_eva", "EVA (abs(E) = 16, chunk size 4)")]


def read_log(path):
    """fairseq's json records by kind ('train_inner', 'train', 'valid'), and the parameter count."""
    records = {"train_inner": [], "train": [], "valid": []}
    params = None
    if not os.path.exists(path):
        return records, params
    pattern = re.compile(r"\]\[(train_inner|train|valid)\]\[INFO\] - (\{.*\})\s*$")
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = pattern.search(line)
            if m:
                records[m.group(1)].append({k: _num(v) for k, v in json.loads(m.group(2)).items()})
            elif "num. shared model params:" in line and params is None:
                params = int(re.search(r"params: ([\d,]+)", line).group(1).replace(",", ""))
    return records, params


def _num(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def read_translations(path, count):
    """The source, reference and hypothesis of the first `count` test sentences (by id) of fairseq-generate's
    output (BPE removed, Moses-tokenised)."""
    found = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"([STH])-(\d+)\t(.*)$", line.rstrip("\n"))
                if m and int(m.group(2)) < count:
                    text = m.group(3).split("\t")[-1]  # H- lines carry the score first
                    found.setdefault(int(m.group(2)), {})[{"S": "source", "T": "reference", "H": "hypothesis"}[m.group(1)]] = text
    return [found[i] for i in sorted(found)]


def fmt(value, digits=2):
    return "n/a" if value is None else f"{value:.{digits}f}"


def summary(records, params):
    last_train = records["train"][-1] if records["train"] else {}
    last_valid = records["valid"][-1] if records["valid"] else {}
    return {
        "params": f"{params:,}" if params else "n/a",
        "updates": int(last_train.get("train_num_updates", 0)),
        "epochs": int(last_train.get("epoch", 0)),
        "wall": last_train.get("train_wall"),
        "valid_loss": last_valid.get("valid_loss"),
    }


def build_tables(out):
    """The Markdown lines, the training records for the curves, and the numbers for results.json."""
    numbers = {"translation": {}, "language_model": {}}
    lines = ["### Translation (po_en_de sample: En-De software strings)", "",
             "| encoder self-attention | params | epochs | updates | train time (s) | valid loss (base 2) "
             "| test BLEU, compound-split tokenised | test sacreBLEU, detokenised |",
             "|---|---|---|---|---|---|---|---|"]
    curves = {}
    for name, label in TRANSLATION:
        records, params = read_log(f"{out}/checkpoints/{name}/hydra_train.log")
        s = summary(records, params)
        tok, sacre = read_bleu(f"{out}/checkpoints/{name}/bleu.test.txt")
        lines.append(f"| {label} | {s['params']} | {s['epochs']} | {s['updates']} | {fmt(s['wall'], 0)} "
                     f"| {fmt(s['valid_loss'])} | {fmt(tok)} | {fmt(sacre)} |")
        curves[("translation", label)] = records
        numbers["translation"][name] = {"label": label, **s, "bleu_compound_split": tok, "sacrebleu": sacre,
                                        "first_test_translations": read_translations(
                                            f"{out}/checkpoints/{name}/gen.test.out", 3)}
    lines += ["", "### Language model (doc_en sample: English documentation prose, Wikitext-103 recipe)", ""]
    for name, label in LM:
        records, params = read_log(f"{out}/checkpoints/{name}/hydra_train.log")
        s = summary(records, params)
        rows = read_ppl(f"{out}/checkpoints/{name}/ppl.tsv")
        cols = [f"{r['subset']} ppl, context {r['context']}" for r in rows]
        lines.append("| decoder self-attention | params | updates | train time (s) | " + " | ".join(cols) + " |")
        lines.append("|---" * (4 + len(cols)) + "|")
        lines.append(f"| {label} | {s['params']} | {s['updates']} | {fmt(s['wall'], 0)} | "
                     + " | ".join(fmt(float(r["ppl"])) for r in rows) + " |")
        curves[("language model", label)] = records
        numbers["language_model"][name] = {"label": label, **s, "ppl": [
            {"subset": r["subset"], "context": int(r["context"]), "ppl": float(r["ppl"])} for r in rows]}
    return lines, curves, numbers


def plot(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task for task, _ in curves}, reverse=True)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2))
    axes = [axes] if len(tasks) == 1 else list(axes)
    for ax, task in zip(axes, tasks):
        for (t, label), records in curves.items():
            if t != task:
                continue
            inner = [(r["num_updates"], r["loss"]) for r in records["train_inner"]]
            if inner:
                line, = ax.plot(*zip(*inner), label=f"{label}: train")
                color = line.get_color()
            else:
                color = None
            valid = [(r["valid_num_updates"], r["valid_loss"]) for r in records["valid"]]
            if valid:
                ax.plot(*zip(*valid), "o--", color=color, label=f"{label}: valid")
        ax.set_title(task)
        ax.set_xlabel("updates")
        ax.set_ylabel("loss (base 2)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("fairseq-eva demo: training curves on the bundled sample")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the demo's output folder")
    parser.add_argument("--wall-seconds", type=int, help="the demo's wall time, for the table's header")
    args = parser.parse_args(argv)
    lines, curves, numbers = build_tables(args.out)
    if args.wall_seconds is not None:
        lines = [f"Demo wall time: {args.wall_seconds} s.", ""] + lines
    text = "\n".join(lines) + "\n"
    print(text)
    with open(f"{args.out}/results.md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(f"{args.out}/results.json", "w", encoding="utf-8") as f:
        json.dump({"wall_seconds": args.wall_seconds, **numbers}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    plot(curves, f"{args.out}/curves.png")
    print(f"wrote {args.out}/results.md, results.json and curves.png")


if __name__ == "__main__":
    main()
