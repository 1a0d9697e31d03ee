"""fairseq-eva: EVA attention as a fairseq plugin (`--user-dir fairseq_eva`).

The attention core (`fairseq_eva.attention`) is plain PyTorch. When fairseq is importable, importing
the package also registers the models and architectures with fairseq and the few types that fairseq
checkpoints hold with torch's weights-only unpickler (see `checkpoint_safety`), and makes a mistake in
what the user gave (a bad option, a file that is not a checkpoint) stop a fairseq tool with one line
(see `errors`); it makes fairseq keep the last batch that fairseq 0.12.3 drops (see `batching`), copy
checkpoints atomically (see `checkpoint_safety`), leave no empty --save-dir after a failed run (see
`save_dir`) and go on counting `wall` after a resume within an epoch (see `wall_clock`); it registers the
`adaptive_loss_fp32_sum` criterion that the language-model configs use (see `adaptive_loss`), silences
fairseq's harmless warnings (see `harmless_warnings`) and stops fairseq's batch-prefetching threads at exit
so that a finished run does not abort while Python shuts down (see `clean_exit`).
"""

import importlib.util

from .attention import EVAAttention  # noqa: F401

if importlib.util.find_spec("fairseq") is not None:
    # on import: checkpoint_safety registers the safe globals, models the models and architectures,
    # batching makes fairseq keep the last batch of an evaluation set, adaptive_loss registers its criterion,
    # save_dir removes the empty --save-dir of a failed run, wall_clock keeps the log's `wall` counting after a resume
    from . import adaptive_loss, batching, checkpoint_safety, clean_exit, models, save_dir, wall_clock  # noqa: F401
    from .errors import report_user_errors
    from .harmless_warnings import ignore_harmless_warnings

    checkpoint_safety.make_copies_atomic()
    ignore_harmless_warnings()  # fairseq 0.12's deprecation noise with this torch and hydra
    clean_exit.register()
    report_user_errors()  # a bad option or file stops a fairseq tool with one line, as argparse's errors do
