"""fairseq-eva: EVA attention as a fairseq plugin (`--user-dir fairseq_eva`)."""

from .attention import EVAAttention  # noqa: F401
