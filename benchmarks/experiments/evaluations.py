"""The evaluation scripts' results: scripts/eval_wmt14.sh's BLEU and scripts/eval_lm.sh's perplexities, read by
the paper's tables and the demo's report."""

import csv
import os
import re


def read_bleu(path):
    """(compound-split tokenised BLEU, sacreBLEU) from scripts/eval_wmt14.sh's bleu.test.txt."""
    tok = sacre = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"BLEU4 = ([\d.]+)", line)
                if m:
                    tok = float(m.group(1))
                m = re.search(r"(?:^|\s)BLEU(?:\|[^=]*)? = ([\d.]+)", line) if not line.startswith("BLEU4") else None
                if m:
                    sacre = float(m.group(1))
    return tok, sacre


def read_ppl(path):
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    return rows
