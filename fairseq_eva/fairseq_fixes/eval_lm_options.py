"""fairseq-eval-lm with a --context-window as large as --tokens-per-sample stops with one line.

fairseq-eval-lm scores blocks of `--tokens-per-sample - --context-window` new tokens, each after up to
--context-window tokens of context. With a window of --tokens-per-sample or more that length is zero or
negative, and fairseq loads the model and the data first, then ends in a traceback from its token blocks
(ZeroDivisionError, or negative dimensions). The options are checked here before anything is loaded.
"""

import functools

from ..errors import UserError
from .wrap_once import wrap_once


def check(cfg):
    """Raise UserError when --context-window leaves no new token in a block of --tokens-per-sample."""
    window = getattr(getattr(cfg, "eval_lm", None), "context_window", 0) or 0
    tokens = getattr(getattr(cfg, "task", None), "tokens_per_sample", None)
    if window > 0 and tokens is not None and window >= tokens:
        raise UserError(
            f"--context-window {window} must be smaller than --tokens-per-sample {tokens}: each block scores "
            f"tokens-per-sample minus context-window new tokens; give a smaller --context-window "
            f"(e.g. {tokens // 2}) or a larger --tokens-per-sample"
        )


def _checking_options(call_main):
    @functools.wraps(call_main)
    def wrapper(cfg, main, *args, **kwargs):
        check(cfg)
        return call_main(cfg, main, *args, **kwargs)

    return wrapper


def install():
    """Check fairseq-eval-lm's context window before its run starts (idempotent)."""
    from fairseq.distributed import utils as distributed_utils

    wrap_once(distributed_utils, "call_main", _checking_options)
