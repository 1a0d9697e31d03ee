#!/usr/bin/env python
"""Long context at equal CPU time: softmax, EVA and local attention in language models and masked language
models of equal size, and EVA's approximation error inside the trained language model.

  python scripts/long_context.py CORPUS --work DIR [--task all] [--budget-minutes 20] [--tokens-per-sample 2048]

CORPUS holds plain text train.txt, valid.txt, test.txt (paragraphs, a blank line between documents).
Steps, each skipped when its output exists (run the same command again to resume):
  1. a sentencepiece vocabulary and binarised data, by data_prep/prepare_mlm.sh (BPE=sentencepiece),
     from the first --train-words words of train.txt (whole documents) and all of valid and test; plus a
     'valid_small' split (the first --valid-words words of valid.txt) for the curves. Both tasks read it;
  2. each row of each task trains (fairseq-train, --parallel processes at a time, --threads threads each)
     until its process CPU time reaches --budget-minutes; the stop is fairseq's --stop-time-hours, counted
     here in CPU seconds of the training process (validation included) rather than in wall-clock seconds,
     so that rows are comparable on a loaded machine. With --device cuda the rows train on the GPU with
     --fp16 and the budget is fairseq's own wall-clock time. Stopping this script (Ctrl-C, kill) stops its
     trainings; a row interrupted part way resumes from its checkpoint_last.pt with the time it had spent
     (fairseq stores it in the checkpoint); a row done at a smaller budget trains on to the larger one.
     Progress: each validation prints the row, training seconds, updates and valid_small perplexity, also
     appended to DIR/ROW/curve.jsonl; the load average at the start and end of each row goes to
     DIR/ROW/load.json;
  3. test perplexity of each row's last checkpoint: fairseq-eval-lm with context windows 0 and half the
     block (lm), fairseq-validate on the test split (mlm; the masks are fixed by the seed, the same for
     every row);
  4. approx: on the trained EVA language model (DIR/eva/checkpoint_last.pt) and the first --approx-blocks
     blocks of valid_small, each layer's relative error ||y - y_softmax||_F / ||y_softmax||_F of its EVA
     output, and of local attention alone (the keys of E^n only), against exact softmax attention over the
     same queries, keys and values (the same bias inside E^n; scripts/lm_diagnostics.py);
  5. DIR/results.md, of every row in DIR done so far: per task, the rows at the end of their budget (equal
     CPU time), valid_small perplexity at equal updates and at equal CPU time (a row trained with several
     --seeds shows the mean, then each seed's value), commands and load; and one plot per task,
     DIR/lm_curves.png and DIR/mlm_curves.png (valid_small perplexity against CPU time and updates).
Tasks (--task): lm, mlm, approx, or all (the three in that order). lm rows are the causal language model
transformer_lm_eva, in DIR/ROW; mlm rows are roberta_eva (pre-norm RoBERTa) of the same size, blocks
(--sample-break-mode none) and optimisation, in DIR/mlm-ROW; a seed other than 1 adds -seedN. Rows
(--rows), every one with the same command but for its attention options:
  softmax     exact attention, the model's own (fairseq's MultiheadAttention, no relative position bias);
  exact       exact attention with the relative position bias: EVA's layer with one window over the
              whole block and no chunks;
  eva         EVA with the paper's setting: lm window 128, chunks of 8 tokens; mlm window 256, C = 128
              chunks; relative position bias inside the window;
  eva-W-N     EVA with window W and, lm: chunks of N tokens, mlm: N chunks (the paper's (|E|, C));
  eva...-V    an EVA row with a variant V (eva-nonoise, eva-128-8-linear): nonoise
              (--eva-omega-noise false: omega = mu in training), linear or identity (--eva-proposal),
              logsize (--eva-chunk-logit-offset log(chunk size): each summary's logit as if it stood for
              its chunk's keys), average (--eva-proposal-mean average: mu halved, as the authors'
              bidirectional code), noattdrop (--attention-dropout 0, as the authors' encoders), table
              (--eva-rpe-type table: a learned bias per query and key place in the block, the authors'
              masked-LM local attention bias, instead of T5 buckets);
  local       EVA's window alone (lm 128, mlm 256), no chunks;  local-W: window W; local...-V: the variant
              noattdrop or table;
  NAME        another attention of the registry that runs in the task's direction (docs/usage.md; lm: performer,
              rfa, elu, t2r; mlm: also lara, linformer, reformer, combiner, long_short), at equal cost to the
              task's eva row: its multiply-adds per token by the registry's formulas at the block length,
              --dim and --heads come closest to EVA's (lm window 128, chunks of 8; mlm window 256, C = 128)
              through the option that sets its cost (benchmarks/mechanisms.py KNOBS: performer num_features,
              rfa num_features, t2r num_features, lara num_landmarks, linformer projected_dim, reformer
              chunk_size, combiner span, long_short num_landmarks), the others at the paper's masked-LM
              settings (Performer's ReLU features, Reformer's 4 hashes, Transformer-LS window 256;
              benchmarks/mechanisms.py PAPER); Linformer's max_positions is the block length. The paper has no
              causal Performer: lm performer rows use its positive (FAVOR+) features. elu has no such option
              and keeps its only setting. At the defaults (2048 tokens, 256 dims, 4 heads) the options are,
              lm (EVA 386 D): performer 97, rfa 64, t2r 96; mlm (EVA 770 D): performer 193, rfa 128, t2r 192,
              lara 128, linformer 193, reformer chunks of 42, combiner span 314, long_short 32 landmarks;
  NAME-V      that attention with its cost option set to the number V instead (performer-256, reformer-64).
The tables give each row's multiply-adds per token of one layer's attention (in units of the width D,
beyond the projections; the registry's cost formulas) beside its name.
"""

from benchmarks.experiments.long_context import main

if __name__ == "__main__":
    main(__doc__)
