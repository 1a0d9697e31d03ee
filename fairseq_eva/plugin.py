"""The fairseq plugin: importing this module installs it (idempotent), as `--user-dir fairseq_eva` does.

It registers the models, architectures and the `adaptive_loss_fp32_sum` criterion with fairseq, makes a mistake in
what the user gave (a bad option, a file that is not a checkpoint) stop a fairseq tool with one line (`errors`), and
installs the workarounds of fairseq 0.12 (`fairseq_fixes`). Importing the package `fairseq_eva` imports this module
when fairseq is already imported (fairseq's tools, the hub); the attention core never does.
"""

import contextlib
import importlib.util
import logging
import sys


@contextlib.contextmanager
def _fairseq_imported_quietly():
    """fairseq's import configures the caller's logging: its speech tasks and fairseq_cli's modules call
    logging.basicConfig (the root logger at INFO or DEBUG, with a handler), and one task says at INFO that
    tensorboardX, which only that task uses, is missing. A library's import should neither print nor configure
    logging, so the root logger is left as it was. Under fairseq's own tools fairseq is imported (and logs)
    before the plugin: nothing changes."""
    if sys.modules.get("fairseq") is not None:
        yield
        return
    root, speech = logging.getLogger(), logging.getLogger("fairseq.tasks.text_to_speech")
    handlers, level = list(root.handlers), root.level
    speech.setLevel(logging.WARNING)
    try:
        yield
    finally:
        speech.setLevel(logging.NOTSET)
        root.handlers[:] = handlers
        root.setLevel(level)


def install():
    """Register the models and the criterion, report user errors in one line, install the fixes (idempotent). The
    one-line report comes first, so that a fairseq the fixes do not fit is said in one line too."""
    with _fairseq_imported_quietly():  # the fixes import parts of fairseq_cli, which configure logging too
        if importlib.util.find_spec("fairseq") is None:
            raise ImportError("fairseq_eva.plugin needs fairseq 0.12: pip install 'fairseq-eva[fairseq]', or `make setup`; "
                              "the attention core, fairseq_eva.attention, needs only torch")
        from . import criterions, fairseq_fixes, models  # noqa: F401
        from .errors import report_user_errors

        report_user_errors()
        fairseq_fixes.install()


install()
