#!/usr/bin/env python
"""The paper's three language tables, one command each: at the sample's scale on a CPU, at full size on GPUs.

  python scripts/paper_table.py --table mt --work DIR [--seeds 1,2,3] [--rows softmax,eva16,...]
  python scripts/paper_table.py --table mt --scale full --data DATA --work DIR [--dry-run]

Tables (--table) and their rows, named after the configs (configs/wmt14_en_de_ROW.yaml, wikitext103_ROW.yaml,
mlm_ROW.yaml), with the paper's number beside each:
  mt   WMT14 En-De, encoder self-attention: softmax, eva16, eva32, eva64, performer128, lara16, lara32, lara64;
       test BLEU on compound-split tokenised output (and sacreBLEU);
  lm   Wikitext-103, decoder self-attention: softmax_16l, eva_16l, elu_16l, rfa_16l, t2r_16l, softmax_32l,
       eva_32l; test perplexity at context windows 0, 256 and 480;
  mlm  masked LM, every encoder layer: softmax_2048, eva_2048, local_2048, performer_2048, linformer_2048,
       lara_2048, reformer_2048, combiner_2048, long_short_2048, softmax_4096, eva_4096; validation perplexity.

Scales (--scale):
  sample  mt: each row's config with the tiny architecture of the demo (2+2 layers of
          64 units, 4 heads, make demo) on the bundled En-De sample (data/sample/po_en_de, Moses and a joint
          BPE of --bpe merges, as data_prep/prepare_wmt14_en_de.sh), --epochs epochs (the demo's 8, about
          1,050 updates) or until --budget-minutes of the training process's CPU time, for each of --seeds.
          The attention settings are the config's scaled as the demo scales EVA-32's (|E| = 8, C = 4): every
          length and size by 1/4, the ratio of the head widths (16 to 64) and about that of the sentence
          lengths (7 words a sentence on average against WMT14's 23 to 27), and C by 1/2 (SCALED below).
          Two more rows may be asked for, each EVA-16's layer with one part taken away: exact (--rows
          ...,exact), softmax attention with EVA's relative position bias (one window over the sentence, no
          chunks), which separates what the bias does from what EVA's approximation does; and local (--rows
          ...,local), EVA-16's windows without the chunks, which separates the windows from the summaries.
          Then the last --average epoch checkpoints are averaged, and the test split translated with beam 4
          and length penalty 0.6 (scripts/eval_wmt14.sh) on the CPU. --data replaces the sample with other
          binarised data (the tests use a smaller one).
          lm, mlm: scripts/long_context.py, the small language models of equal size at equal CPU time on the
          bundled English prose (data/sample/doc_en, or --corpus), with the table's rows that have a small
          counterpart (SAMPLE_ROWS: the 32-layer and 4096-token rows have none); arguments after `--` go to it
          (e.g. -- --budget-minutes 10); its results.md and curves are the table.
  full    the configs as they are on the GPUs that torch sees (scripts/train_wmt14.sh, train_wikitext103.sh,
          train_mlm.sh: fairseq's distributed options, the paper's effective batch), then the paper's
          evaluation (scripts/eval_wmt14.sh: the last 10 epoch checkpoints averaged, beam 4, length penalty
          0.6, compound-split BLEU and sacreBLEU; scripts/eval_lm.sh at context windows 0, 256 and 480;
          scripts/eval_mlm.sh: validation perplexity). Without a GPU (torch sees none, or NGPUS=0) it is refused
          unless given --allow-cpu: the paper's models would train for weeks.
--dry-run prints every command, as one can run it, and runs none: at full size the scripts above; at sample scale
(mt) the sample's preparation (data_prep/prepare_wmt14_en_de.sh, unless --data), each run's fairseq-hydra-train
(without the CPU-time clock that this script adds) and its scripts/eval_wmt14.sh.
Every run (a row and a seed) has its folder DIR/ROW-seedN; a run that has its result is skipped and one that
stopped part way resumes from its checkpoint_last.pt, so the same command, run again, resumes (SIGTERM stops
the trainings too; exit status 143). Each folder records the settings its run was trained with (settings.json:
--data, and at sample scale --bpe, --epochs, --budget-minutes, --max-tokens, --lr, --average): a command with
other settings stops before training, naming the difference. Progress goes to the terminal (one line a
validation); the run's output to DIR/ROW-seedN/train.log and eval.log.
At the end (and with --report alone, of every run in DIR unless --rows or --seeds choose), DIR/results.md: the
runs found, one table, each row's mean over its seeds with the seeds' range, the paper's number, parameters,
updates and time; which rows' seed ranges do not overlap (none claimed for a row with one seed); and
DIR/curves.png, validation loss against updates and against training time (CPU time at sample scale).
--record FOLDER keeps what the table is made of (each run's command, curve and result, the table, the figure and
a meta.json with the command, commit, date and machine), e.g. under benchmarks/results/; it refuses a checkout
whose tracked files have changed (the commit would not be what ran). Runs that take hours go from a clean clone
at one commit: scripts/at_commit.sh COMMIT WORKDIR -- python scripts/paper_table.py ... --record FOLDER.
"""

from benchmarks.experiments.paper_table import main

if __name__ == "__main__":
    main(__doc__)
