"""fairseq-eva: EVA attention in plain PyTorch, and as a fairseq plugin (`--user-dir fairseq_eva`).

Two parts:
- `attention`: the core (EVAAttention, the baselines of its registry, the kernels), plain PyTorch. Importing it,
  or anything of the package, changes nothing outside the package, whether fairseq is installed or not.
- the plugin (`plugin`): `modules`, `models`, `criterions` (fairseq's calling convention, the architectures, the
  `adaptive_loss_fp32_sum` criterion), `fairseq_fixes` (workarounds for fairseq 0.12 with this torch and hydra)
  and `errors` (a mistake in what the user gave stops a fairseq tool with one line).

Importing any module of the package runs this file first, so this file alone decides whether the plugin installs:
it does when fairseq is already imported. fairseq's tools import fairseq before they import `--user-dir
fairseq_eva` (or `common.user_dir`), and the hub before it imports the user dir that a checkpoint names; a program
that uses the core alone never imports fairseq. From Python, `import fairseq_eva.plugin` installs the plugin
whatever was imported before (needed where the core was imported first: the package is then already imported,
and fairseq does not import it again).
"""

import sys

from .attention import EVAAttention  # noqa: F401

if sys.modules.get("fairseq") is not None:
    from . import plugin  # noqa: F401
