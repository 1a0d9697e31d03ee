"""fairseq-eval-lm with --context-window at or above --tokens-per-sample, or below 0, stops with one line.

eval-lm scores blocks of tokens_per_sample - context_window new tokens, each after context_window tokens of
context, so the window must be smaller than the block. fairseq does not check: it subtracts and fails later,
inside its token blocks, with `ZeroDivisionError: float division` (equal) or `ValueError: negative
dimensions are not allowed` (above), after loading the data and the model. A negative window is taken as no
window at all: `--context-window -5` scores as 0 does, without a word.
"""

import functools
from argparse import Namespace

from ..errors import UserError


def check(cfg):
    """Raises UserError when the context window is negative or leaves no token of a block to score."""
    if isinstance(cfg, Namespace):  # main(args), as fairseq's older callers pass it
        window, block = cfg.context_window, cfg.tokens_per_sample
    else:
        window, block = cfg.eval_lm.context_window, cfg.task.tokens_per_sample
    if window < 0:
        raise UserError(f"--context-window {window} is negative: give 0 (no context) or a number of tokens below "
                        f"--tokens-per-sample {block} (e.g. {block // 2})")
    if window > 0 and window >= block:
        raise UserError(f"--context-window {window} must be smaller than --tokens-per-sample {block}: each block "
                        f"of {block} tokens scores the tokens after its first {window} (e.g. --context-window "
                        f"{block // 2} with --tokens-per-sample {block})")


def _checking_window(main):
    @functools.wraps(main)
    def wrapper(cfg, *args, **kwargs):
        check(cfg)
        return main(cfg, *args, **kwargs)

    return wrapper

