"""Workarounds for fairseq 0.12 with this torch and hydra, installed from one table when the plugin loads.

`FIXES` says what each module fixes (docs/design.md's table is rendered from it, `fix_table`); `WRAPS` is every
fairseq function the fixes wrap, by qualified name, each target's rows together and innermost first, so that
the order of a chain is read, and chosen, here. Each module's docstring says why in full and how to see the bug
without it (fairseq's tool run without --user-dir). What the wrappers of different targets tell each other is in
`state`. `install` (idempotent: fairseq may import a --user-dir more than once) first checks that fairseq is the
0.12 the fixes were written for and has every target, and stops with one line naming what is not there.
"""

import dataclasses
from typing import Callable, Optional

from . import (
    batch_limits,
    batching,
    checkpoint_paths,
    checkpoint_safety,
    clean_exit,
    data_dir,
    distributed,
    eval_lm_window,
    harmless_warnings,
    interrupt,
    model_fit,
    model_help,
    quiet_logs,
    same_attention,
    save_dir,
    wall_clock,
)
from .patching import FairseqMismatch, Wrap, installed  # noqa: F401  (the table's parts, for harnesses and tests)
from .patching import install as _install


@dataclasses.dataclass(frozen=True)
class Fix:
    """One workaround: the problem in fairseq 0.12, how to see it without the plugin, what the fix does, and what
    it sets up besides its rows of `WRAPS` (`setup`, with `sets`: what that changes)."""

    module: object
    problem: str
    without: str
    remedy: str
    setup: Optional[Callable] = None
    sets: str = ""

    @property
    def name(self):
        return self.module.__name__.rsplit(".", 1)[-1]


FIXES = (
    Fix(batch_limits,
        "a `--max-tokens` below the longest sentence fails fairseq's assertion, which names neither the option nor "
        "the length needed",
        "`AssertionError: Sentences lengths should not exceed max_tokens=16` (fairseq-generate --max-tokens 16)",
        "one line naming the sentence's length and the `--max-tokens` it needs"),
    Fix(batching,
        "fairseq 0.12.3 drops the last batch when its size is not a multiple of `--required-batch-size-multiple` "
        "(8 by default): fairseq-generate, fairseq-eval-lm and validation skip up to 7 sentences without a word "
        "(3 of newstest2014's 3003, 4 of the demo's 500)",
        "fairseq-generate on the demo's 500 test sentences prints 496",
        "that batch is given back; the evaluation scripts also pass `--required-batch-size-multiple 1`, and "
        "`eval_wmt14.sh` checks that every sentence was translated"),
    Fix(checkpoint_paths,
        "a `--path` that is missing or a folder, a `--restore-file` that is missing (fairseq-train starts afresh "
        "without a word), a hub folder that is missing",
        "`OSError: Model file not found` or `IsADirectoryError` (fairseq-generate --path checkpoints/demo_mt)",
        "one line naming the path and the checkpoints beside it, before fairseq loads anything"),
    Fix(checkpoint_safety,
        "torch >= 2.6 loads weights-only by default and fairseq checkpoints hold `argparse.Namespace`; a file that "
        "is not a checkpoint gets torch's advice to unpickle anything; fairseq copies a saved checkpoint to "
        "`checkpoint_last.pt` / `checkpoint_best.pt` in place, so a killed copy leaves a truncated file",
        "fairseq-generate on a checkpoint of a legacy-configured model stops with torch's `weights_only` message",
        "registers the few types checkpoints need as safe globals (never unrestricted unpickling); the copies go "
        "through a temporary file renamed into place, as fairseq's first write already does; a file that is not a "
        "checkpoint, empty or cut short stops with one line naming it, as does one whose bytes changed after it was "
        "written (the CRC-32 that torch stores for each part of its archive, which torch never checks, is checked "
        "before loading)",
        setup=checkpoint_safety.allow_fairseq_types, sets="torch's safe globals"),
    Fix(clean_exit,
        "fairseq prefetches batches on a daemon thread (`BufferedIterator`, `BackgroundConsumer`) that nothing stops "
        "when training ends mid-epoch; caught inside a torch operation at interpreter shutdown it aborts the process",
        "a run that stops at `--max-update` early in an epoch ends with \"terminate called without an active "
        "exception\" (SIGABRT) after \"done training\"",
        "an atexit handler, which runs before finalization, tells each live prefetching thread to stop after its "
        "batch and empties its queue until it has ended (10 s at most)",
        setup=clean_exit.install, sets="an atexit handler"),
    Fix(data_dir,
        "a data folder that is missing or holds another task's data, or a split that it does not hold, ends in a "
        "traceback",
        "a `FileNotFoundError` traceback (`fairseq-train no_such_folder ...`) or `Exception: Could not infer "
        "language pair`",
        "one line naming the folder and what it holds, before the task reads it"),
    Fix(distributed,
        "fairseq reads torchrun's `WORLD_SIZE` / `RANK` only when `distributed_world_size` > 1, which defaults to "
        "the visible GPUs: under torchrun on the CPU or one GPU it silently runs N separate trainings",
        "`torchrun --nproc_per_node 2 fairseq-train ... --cpu` logs `distributed_world_size: 1` twice",
        "the models, when built, stop with an error naming the options if torchrun started N > 1 processes that did "
        "not join one group of N ([below](#distributed-training))",
        sets="nothing: the models call `check_launch`"),
    Fix(eval_lm_window,
        "fairseq-eval-lm with `--context-window` at or above `--tokens-per-sample` subtracts one from the other and "
        "fails in its token blocks after loading the data and the model; a negative window is taken as none",
        "`ZeroDivisionError: float division` (equal windows)",
        "one line naming both options, before anything loads"),
    Fix(harmless_warnings,
        "every run prints deprecation warnings of hydra, `pin_memory`, `torch.cuda.amp`, `key_padding_mask`",
        "any fairseq-train run prints them",
        "they are silenced, each one named with why it is harmless",
        setup=harmless_warnings.install, sets="Python's warning filters"),
    Fix(interrupt,
        "Ctrl-C, the way to stop a run and resume it, ends in an 84-line `KeyboardInterrupt` traceback that does not "
        "say where the run resumes",
        "press Ctrl-C during fairseq-train",
        "one line naming the checkpoint the same command resumes from and its update, exit status 130; Ctrl-C "
        "during a checkpoint save is held back until the save ends (raised inside torch.save it could be "
        "swallowed, the run going on, or abort the process)"),
    Fix(model_fit,
        "a model that does not fit its task, its dictionaries or `--tokens-per-sample` fails far from the cause",
        "a language model trained on translation data ends in a `TypeError` and a crash.pt; fairseq-eval-lm on a "
        "translation checkpoint in `AttributeError: ... supported_targets`",
        "one line when the model is built: its kind against the task's, a checkpoint's embeddings against the "
        "dictionaries, the task's blocks against the model's positions"),
    Fix(model_help,
        "`--help` shows none of a model's options: fairseq adds them after the parse that acts on `--help`",
        "`fairseq-train --help --user-dir fairseq_eva --arch transformer_eva_tiny` lists no attention option",
        "with an `--arch`, `--help` is taken off the first parse and the help printed at the last, the model's "
        "options included"),
    Fix(quiet_logs,
        "each batch iterator (every epoch, validation and hub call) logs `can_reuse_epoch_itr`, `reuse_dataloader`, "
        "`rebuild_batches` and \"creating new batches for epoch N\": fairseq's defaults, not the run",
        "any fairseq-train run, or a hub translate call",
        "FairseqTask's logger, which logs nothing else at INFO, is set to WARNING (unless the user set its level)",
        setup=quiet_logs.install, sets="a logger's level"),
    Fix(same_attention,
        "fairseq-train resumes (or restores, fine-tunes) a checkpoint into the model of the command line if the "
        "parameters fit: trained with elu, resumed with softmax, a run went on without a word; other changes ended "
        "in the 112-line `Cannot load model parameters`",
        "train a tiny language model with `--decoder-attention elu`, then run the same command with "
        "`--decoder-attention softmax`",
        "the models write their attention record (each role's mechanism, every option, defaults included) into "
        "their options when built, which fairseq saves; the record of the checkpoint the trainer reads is compared "
        "with its model's before any parameter is loaded, one line naming both. Evaluation tools build the model "
        "the checkpoint records"),
    Fix(save_dir,
        "a fairseq-train run that fails before it saves anything (a bad option, missing data) leaves an empty "
        "`--save-dir`",
        "fairseq-train with a bad option leaves the folder",
        "the empty folder it made is removed; a user error met at a batch (a count whose memory exceeds the "
        "machine's) writes no `crash.pt`"),
    Fix(wall_clock,
        "a run resumed from a checkpoint saved within an epoch logs `wall=0` for the rest of the run (the restored "
        "stopwatch has no start)",
        "resume from a `--save-interval-updates` checkpoint and read `wall`",
        "`wall` counts the seconds since the resumed process began, as after a resume at an epoch's end"),
)

# Every wrap of a fairseq function: a target's rows together, innermost (nearest fairseq's own function) first.
WRAPS = (
    # a batch limit too small is named first, from fairseq's own assertion; then the last batch is given back
    Wrap("fairseq.data.data_utils.batch_by_size", batch_limits._naming_the_limit, "batch_limits"),
    Wrap("fairseq.data.data_utils.batch_by_size", batching._keep_last_batch, "batching"),
    # a file that is not a checkpoint is named first; what a checkpoint holds is then noted for the model built
    # from it; last, a trainer's checkpoint is compared with its model before any parameter is loaded
    Wrap("fairseq.checkpoint_utils.load_checkpoint_to_cpu", checkpoint_safety._clear_errors, "checkpoint_safety"),
    Wrap("fairseq.checkpoint_utils.load_checkpoint_to_cpu", model_fit._noting_checkpoint, "model_fit"),
    Wrap("fairseq.checkpoint_utils.load_checkpoint_to_cpu", same_attention._comparing, "same_attention"),
    # fairseq-train's start: the checkpoint to resume is checked before fairseq loads it, followed for Ctrl-C after
    Wrap("fairseq.checkpoint_utils.load_checkpoint", checkpoint_paths._checking_start, "checkpoint_paths"),
    Wrap("fairseq.checkpoint_utils.load_checkpoint", interrupt._following_load, "interrupt"),
    Wrap("fairseq.checkpoint_utils.load_model_ensemble_and_task", checkpoint_paths._checking_paths, "checkpoint_paths"),
    Wrap("fairseq.hub_utils.from_pretrained", checkpoint_paths._checking_folder, "checkpoint_paths"),
    Wrap("fairseq.checkpoint_utils.save_checkpoint", interrupt._following_save, "interrupt"),
    Wrap("fairseq.checkpoint_utils.verify_checkpoint_directory", save_dir._cleaned_up, "save_dir"),
    Wrap("fairseq.file_io.PathManager.copy", checkpoint_safety._atomic_copies, "checkpoint_safety"),
    # a file written is noted for Ctrl-C; outside it, crash.pt is not written for a user's mistake (nor noted)
    Wrap("fairseq.trainer.Trainer.save_checkpoint", interrupt._following_write, "interrupt"),
    Wrap("fairseq.trainer.Trainer.save_checkpoint", save_dir._no_crash_file_for_user_errors, "save_dir"),
    # the trainer is known while its checkpoint is read (same_attention's row above); `wall` restored after it
    Wrap("fairseq.trainer.Trainer.load_checkpoint", same_attention._noting_trainer, "same_attention"),
    Wrap("fairseq.trainer.Trainer.load_checkpoint", wall_clock._keep_wall_start, "wall_clock"),
    Wrap("fairseq.distributed.utils.call_main", interrupt._reporting_interrupt, "interrupt"),
    Wrap("fairseq.models.build_model", model_fit._checking_fit, "model_fit"),
    Wrap("fairseq.options.parse_args_and_arch", model_help._helping, "model_help"),
    Wrap("fairseq.tasks.setup_task", data_dir._checking_data, "data_dir"),
    Wrap("fairseq_cli.eval_lm.main", eval_lm_window._checking_window, "eval_lm_window"),
)

INNER, TABLE = 0, 1  # the layers of `install`: a harness's rows inside the table's


def install(extra=()):
    """Install every fix (idempotent), and a harness's `extra` rows (`Wrap`s of fairseq functions: a training
    script's clock, its record of each validation) inside the table's, nearest fairseq's own functions."""
    _install({INNER: tuple(extra), TABLE: WRAPS})
    for fix in FIXES:
        if fix.setup is not None:
            fix.setup()


def fix_table():
    """docs/design.md's table of the fixes, from `FIXES` and `WRAPS` (a test keeps the page equal to it)."""
    lines = ["| fix | the problem in fairseq 0.12 (with this torch and hydra) | without the fix | the fix | what it "
             "changes |", "|---|---|---|---|---|"]
    for fix in FIXES:
        changes = [f"`{w.target}`" for w in WRAPS if w.fix == fix.name] + ([fix.sets] if fix.sets else [])
        lines.append(f"| `{fix.name}` | {fix.problem} | {fix.without} | {fix.remedy} | {'; '.join(changes)} |")
    return "\n".join(lines)
