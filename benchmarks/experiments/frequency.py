"""The perplexity of predicting every token by its training-split frequency (add-one smoothed): a masked
LM's plateau. scripts/frequency_baseline.py is its command line."""

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
