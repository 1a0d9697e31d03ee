#!/usr/bin/env python
"""The perplexity of predicting every token by its frequency in the training split: where a masked LM sits
before it learns anything from the context (its plateau), the line a run must go below to have left it.

  python scripts/frequency_baseline.py DATA [--subset valid_small] [--json OUT]

DATA is a fairseq-preprocess folder (dict.txt, train and the subset), e.g. scripts/long_context.py's WORK/bin.
The frequencies are add-one smoothed over the dictionary; bos, eos and padding are not scored.
"""

import argparse
import json

from benchmarks.experiments.frequency import frequency_perplexity


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="fairseq-preprocess folder")
    p.add_argument("--subset", default="valid_small", help="split to score (valid_small)")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    result = frequency_perplexity(args.data, args.subset)
    print(f"{args.subset}: perplexity {result['perplexity']:.1f} by training-split frequency "
          f"({result['tokens']:,} tokens; {result['train_tokens']:,} in train)")
    if args.json:
        json.dump(result, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
