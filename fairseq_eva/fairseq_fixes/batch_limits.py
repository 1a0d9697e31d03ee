"""A --max-tokens smaller than the longest sentence stops with one line that says how large it must be.

A batch holds whole sentences, so --max-tokens (`dataset.max_tokens`) must be at least the longest one that is
not filtered out by the positions of the model. fairseq's `data_utils.batch_by_size` asserts it and ends in a
traceback, `AssertionError: Sentences lengths should not exceed max_tokens=16`, which names neither the option
nor the length needed. Here that assertion becomes a UserError giving both.
"""

import functools

from ..errors import UserError, option

FAIRSEQ_MESSAGE = "Sentences lengths should not exceed max_tokens"


def longest(indices, num_tokens_fn, num_tokens_vec):
    if num_tokens_vec is not None:
        return int(max(num_tokens_vec))
    return int(max(num_tokens_fn(i) for i in indices))


def _naming_the_limit(batch_by_size):
    @functools.wraps(batch_by_size)
    def wrapper(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None, *args, **kwargs):
        try:
            return batch_by_size(indices, num_tokens_fn, num_tokens_vec, max_tokens, *args, **kwargs)
        except AssertionError as error:
            if not str(error).startswith(FAIRSEQ_MESSAGE):
                raise
            n, name = longest(indices, num_tokens_fn, num_tokens_vec), option("dataset", "max_tokens")
            raise UserError(f"a sentence of {n} tokens does not fit in a batch of {name} {int(max_tokens)}: a batch "
                            f"holds whole sentences; give {name} {n} or more") from None

    return wrapper

