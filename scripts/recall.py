#!/usr/bin/env python
"""Long-range recall: can a causal language model copy text it saw further back than EVA's window?

  python scripts/recall.py DATA --work DIR [--rows softmax,local,eva4,eva16] [--updates 1500] [--seeds 1]

DATA is a binarised language-model folder (dict.txt, train, test and valid_small or valid), such as the
WORK/bin that scripts/long_context.py prepares. Steps, each skipped when its output exists (run the same
command again to resume; a larger --updates trains the rows on from their checkpoints):
  1. DIR/bin: blocks of --tokens-per-sample N tokens cut from each split's token stream, each block A + B
     where A is H = N/2 consecutive tokens and B is A rotated by a random offset o in [0, H/2]
     (B = A[o:] A[:o]). Every token of B but two (its first, and A[0] where the rotation wraps) can be
     copied from A, from H - o >= H/2 or more tokens back: further than the EVA window when H/2 > window.
     Offsets are drawn with --seed and kept in DIR/bin/SPLIT.offsets.json;
  2. each row trains the same model (fairseq-train, transformer_lm_eva) on these blocks for --updates
     updates, once per training seed of --seeds (the blocks stay those of --seed), one process at a time, in
     DIR/ROW (seed 1) or DIR/ROW-seedN; CPU seconds and valid perplexity (whole blocks) at each validation go
     to its curve.jsonl (scripts/long_context.py's trainer);
  3. each run's last checkpoint on the first --test-blocks test blocks: perplexity on A (ordinary language
     modelling) and on the copyable tokens of B (the recall), in its recall.json;
  4. DIR/results.md and DIR/curves.png (valid perplexity against training CPU time), of every run in DIR;
     where DIR has the exact and local rows of seed 1, each run's share of exact attention's recall:
     (log B_local - log B_run) / (log B_local - log B_exact), B the perplexity on the repeated part.
Rows: softmax (exact causal attention, fairseq's, absolute positions only), exact (exact causal attention
with the relative position bias: EVA's layer with one window over the whole block, no chunks), local (EVA's
window alone: --window, no chunks), evaS (causal EVA with that window and chunks of S tokens, so
(N - window) / S chunk summaries at the end of a block); EVA and local attention use the relative position
bias inside the window, as scripts/long_context.py's rows do.
"""

from benchmarks.experiments.recall import main

if __name__ == "__main__":
    main(__doc__)
