"""The earlier home of the attention options, kept so that imports of its names keep working. Each job now has its
module: flags.py (the command-line options), plan.py (options resolved once per self-attention), validation.py (the
checks when a model is built), memory.py, record.py (what a checkpoint records), hydra_keys.py, docs_tables.py and
architecture_defaults.py; roles.py says which options configure which self-attention."""

from ..errors import AttentionOptionError as EVAOptionError  # noqa: F401
from .architecture_defaults import eva_decoder_defaults as decoder_defaults  # noqa: F401
from .architecture_defaults import eva_defaults as common_defaults  # noqa: F401
from .docs_tables import eva_option_table, mechanism_table  # noqa: F401
from .flags import add_lm_args, add_masked_lm_args, add_translation_args  # noqa: F401
from .flags import parse_bool as eva_bool  # noqa: F401
from .hydra_keys import check_model_keys, known_model_keys  # noqa: F401
from .memory import gigabytes, machine_memory  # noqa: F401
from .plan import attention_kind  # noqa: F401
from .record import NOT_RECORDED, attention_record, show_record  # noqa: F401
from .roles import DECODER, ENCODER, LM, option_name  # noqa: F401
from .validation import longest_input  # noqa: F401
