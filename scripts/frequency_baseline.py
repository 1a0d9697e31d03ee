#!/usr/bin/env python
"""The perplexity of predicting every token by its frequency in the training split: where a masked LM sits
before it learns anything from the context (its plateau), the line a run must go below to have left it.

  python scripts/frequency_baseline.py DATA [--subset valid_small] [--json OUT]

DATA is a fairseq-preprocess folder (dict.txt, train and the subset), e.g. scripts/long_context.py's WORK/bin.
The frequencies are add-one smoothed over the dictionary; bos, eos and padding are not scored.
"""

import argparse
import json
import math


def tokens(data, split, dictionary):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(f"{data}/{split}", dictionary)
    if dataset is None:
        raise SystemExit(f"error: no split {split!r} in {data}")
    for i in range(len(dataset)):
        yield from dataset[i].tolist()


def frequency_perplexity(data, subset):
    from fairseq.data import Dictionary

    dictionary = Dictionary.load(f"{data}/dict.txt")
    skip = {dictionary.bos(), dictionary.eos(), dictionary.pad()}
    counts, total = {}, 0
    for t in tokens(data, "train", dictionary):
        if t not in skip:
            counts[t] = counts.get(t, 0) + 1
            total += 1
    nll, scored = 0.0, 0
    for t in tokens(data, subset, dictionary):
        if t not in skip:
            nll -= math.log((counts.get(t, 0) + 1) / (total + len(dictionary)))
            scored += 1
    return {"subset": subset, "perplexity": math.exp(nll / scored), "tokens": scored, "train_tokens": total}


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
