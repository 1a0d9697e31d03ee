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

import importlib.util

from .attention import EVAAttention  # noqa: F401

if importlib.util.find_spec("fairseq") is not None:
    from . import criterions, fairseq_fixes, models  # noqa: F401
    from .errors import report_user_errors

    fairseq_fixes.install()
    report_user_errors()
