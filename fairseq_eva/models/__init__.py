"""Models and architectures registered with fairseq (imported by `--user-dir fairseq_eva`)."""

from ..modules import report_option_errors
from .roberta_eva import RobertaEVAModel
from .transformer_eva import TransformerEVAModel
from .transformer_lm_eva import TransformerLanguageModelEVA

__all__ = ["RobertaEVAModel", "TransformerEVAModel", "TransformerLanguageModelEVA"]

report_option_errors()  # fairseq-train: a bad EVA option is one line, as argparse's errors are
