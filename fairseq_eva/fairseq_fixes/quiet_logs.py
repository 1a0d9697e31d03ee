"""fairseq's batch-iterator bookkeeping, logged at INFO, silenced.

Every pass over a dataset (each training epoch, each validation, each hub `translate` or `score` call) logs
four or five lines of fairseq_task's iterator caching (`can_reuse_epoch_itr = True`, `reuse_dataloader = True`,
`rebuild_batches = False`, `creating new batches for epoch 1`): nothing a user acts on, and they bury the
epoch, loss and validation lines. That logger logs nothing else at INFO; its warnings (e.g. examples skipped for
their length) still show. A level the user set is kept.
"""

import logging

QUIET = ("fairseq.tasks.fairseq_task",)


def install():
    """Show only warnings and errors from the loggers above (idempotent)."""
    for name in QUIET:
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.WARNING)
