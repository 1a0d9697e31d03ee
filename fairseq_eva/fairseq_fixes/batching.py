"""Keep the last batch that fairseq 0.12.3 (the ve-fairseq build) drops.

Its `data_utils.batch_by_size` ends with `if bsz_mult > 1 and len(b[-1]) % bsz_mult != 0: b = b[:-1]`:
the last batch is dropped whenever its size is not a multiple of --required-batch-size-multiple (8 by
default). fairseq-generate, fairseq-interactive's batches, fairseq-eval-lm and validation then skip up to
7 sentences without a word (4 of the demo's 500 test sentences). Loading the plugin (`--user-dir
fairseq_eva`) wraps the function so that the dropped batch is given back: the batches are consecutive
runs of `indices`, so what is missing is its tail, and it was a valid batch (within --max-tokens and
--batch-size) before it was dropped.
"""

import functools

import numpy as np


def _keep_last_batch(batch_by_size):
    @functools.wraps(batch_by_size)
    def wrapper(indices, *args, **kwargs):
        batches = batch_by_size(indices, *args, **kwargs)
        kept = sum(len(b) for b in batches)
        if kept < len(indices):
            batches = [*batches, np.asarray(indices[kept:])]
        return batches

    return wrapper

