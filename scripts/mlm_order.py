#!/usr/bin/env python
"""Does a masked language model read word order? Its masked-token perplexity on a subset, as it is and with
each block's tokens in a random order.

A model that predicts a masked token from the bag of words in its block (as one whose attention is still
spread evenly over the block does) scores the shuffled blocks about as well as the real ones: a ratio near 1.
A model that reads its neighbours loses on the shuffled blocks. The masks are the task's own (the
checkpoint's seed), so the perplexity as it is equals fairseq-validate's on the same blocks. The shuffle
moves each masked position's target with it, and keeps the block's first token (<s>) and the padding in
place.

  python scripts/mlm_order.py --data data-bin/mlm --subset test run/mlm-exact/checkpoint_last.pt run/mlm-eva/checkpoint_last.pt
"""

import argparse

from benchmarks.experiments.mlm_order import checkpoint_row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help="fairseq masked-LM checkpoints (masked_lm task)")
    parser.add_argument("--data", required=True, help="binarised data folder (the checkpoints' dictionary)")
    parser.add_argument("--subset", default="test", help="subset to read blocks from (test)")
    parser.add_argument("--num-blocks", type=int, default=0, help="the subset's first blocks only (0: all)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the shuffle (1)")
    parser.add_argument("--batch-blocks", type=int, default=16, help="blocks a forward pass (16)")
    args = parser.parse_args()
    print("| checkpoint | updates | blocks | masked tokens | perplexity | shuffled | ratio |")
    print("|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        r = checkpoint_row(path, args.data, args.subset, args.num_blocks, args.seed, args.batch_blocks)
        print(f"| {path} | {r['updates']} | {r['blocks']} | {r['masked']} | {r['ppl']:.2f} | {r['shuffled']:.2f} | "
              f"{r['shuffled'] / r['ppl']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
