"""fairseq-eva: EVA attention as a fairseq plugin (`--user-dir fairseq_eva`).

Three parts:
- `attention`: the EVA core in plain PyTorch (and its kernels); it imports nothing from fairseq.
- `modules`, `models`, `criterions`: the fairseq adapters (fairseq's MultiheadAttention calling convention, the
  architectures, the `adaptive_loss_fp32_sum` criterion the language-model configs use).
- `fairseq_fixes`: workarounds for fairseq 0.12 with this torch and hydra, each saying what it fixes.

When fairseq is importable, importing the package installs the workarounds, registers the models, architectures
and criterion, and makes a mistake in what the user gave (a bad option, a file that is not a checkpoint) stop a
fairseq tool with one line (`errors`).
"""

import contextlib
import importlib.util
import logging
import sys

from .attention import EVAAttention  # noqa: F401


@contextlib.contextmanager
def _fairseq_imported_quietly():
    """fairseq's import configures the caller's logging: its speech tasks and fairseq_cli's modules call
    logging.basicConfig (the root logger at INFO or DEBUG, with a handler), and one task says at INFO that
    tensorboardX, which only that task uses, is missing. A library's import should neither print nor configure
    logging, so the root logger is left as it was. Under fairseq's own tools fairseq is imported (and logs)
    before the plugin: nothing changes."""
    if "fairseq" in sys.modules:
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


if importlib.util.find_spec("fairseq") is not None:
    with _fairseq_imported_quietly():  # the fixes import parts of fairseq_cli, which configure logging too
        from . import criterions, fairseq_fixes, models  # noqa: F401
        from .errors import report_user_errors

        fairseq_fixes.install()
        report_user_errors()
