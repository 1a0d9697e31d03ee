"""Models and architectures registered with fairseq (imported by `--user-dir fairseq_eva`)."""

from .roberta_eva import RobertaEVAModel
from .transformer_eva import TransformerEVAModel
from .transformer_lm_eva import TransformerLanguageModelEVA

__all__ = ["RobertaEVAModel", "TransformerEVAModel", "TransformerLanguageModelEVA"]
