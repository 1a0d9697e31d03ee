"""Criterions the plugin registers with fairseq (importing a module registers its criterion)."""

from . import adaptive_loss  # noqa: F401
