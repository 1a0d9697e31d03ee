"""fairseq-eva: EVA attention as a fairseq plugin (`--user-dir fairseq_eva`).

The attention core (`fairseq_eva.attention`) is plain PyTorch. When fairseq is importable, importing
the package also registers the models and architectures with fairseq and the few types that fairseq
checkpoints hold with torch's weights-only unpickler (see `checkpoint_safety`).
"""

import importlib.util

from .attention import EVAAttention  # noqa: F401

if importlib.util.find_spec("fairseq") is not None:
    # on import: checkpoint_safety registers the safe globals, models the models and architectures
    from . import checkpoint_safety, models  # noqa: F401
