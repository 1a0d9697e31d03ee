"""Workarounds for fairseq 0.12 with this torch and hydra, installed by `install()` when the plugin is imported.

Each module fixes one thing, says why in its docstring, and has an idempotent `install()` (fairseq may import a
--user-dir more than once). To see a bug, run its command without the plugin (no --user-dir, or fairseq's tool
with `python -c` and no `import fairseq_eva`):

- batching: fairseq 0.12.3 drops the last batch when its size is not a multiple of
  --required-batch-size-multiple. Without it: fairseq-generate on the demo's 500 test sentences prints 496.
- batch_limits: a --max-tokens below the longest sentence fails fairseq's assertion. Without it:
  `AssertionError: Sentences lengths should not exceed max_tokens=16` (fairseq-generate --max-tokens 16).
- checkpoint_paths: a --path that is missing or a folder, a --restore-file that is missing (fairseq-train starts
  afresh), a hub folder that is missing. Without it: `OSError: Model file not found` or `IsADirectoryError`
  (fairseq-generate --path checkpoints/demo_mt).
- checkpoint_safety: torch's weights-only loading refuses fairseq checkpoints (argparse.Namespace), a file that is
  not a checkpoint gets torch's advice to unpickle anything, and checkpoint_last.pt is a plain, non-atomic copy.
  Without it: fairseq-generate on a checkpoint of a legacy-configured model stops with torch's `weights_only` message.
- clean_exit: fairseq's prefetching thread aborts Python at exit. Without it: a run that stops at --max-update
  early in an epoch ends with "terminate called without an active exception" (SIGABRT) after "done training".
- data_dir: a data folder that is missing or holds another task's data, a split it does not hold. Without it: a
  FileNotFoundError traceback (`fairseq-train no_such_folder ...`) or `Exception: Could not infer language pair`.
- distributed: torchrun with fairseq's defaults trains N independent copies, all rank 0, into one folder.
  Without it: `torchrun --nproc_per_node 2 fairseq-train ... --cpu` logs `distributed_world_size: 1` twice.
- eval_lm_window: fairseq-eval-lm with --context-window >= --tokens-per-sample fails inside its token blocks, and
  takes a negative window as 0. Without it: `ZeroDivisionError: float division` (equal) after loading the data
  and the model.
- harmless_warnings: hydra 1.3's and torch's deprecation warnings that fairseq 0.12 triggers on every run.
  Without it: any fairseq-train run prints them.
- interrupt: Ctrl-C during training ends with an 84-line KeyboardInterrupt traceback that does not say which
  checkpoint the run resumes from. Without it: press Ctrl-C during fairseq-train.
- model_fit: a model that does not fit its task, its dictionaries or --tokens-per-sample. Without it: a language
  model trained on translation data ends in a TypeError and a crash.pt; fairseq-eval-lm on a translation
  checkpoint in `AttributeError: ... supported_targets`.
- model_help: `--help` never shows the model's options, since fairseq adds them after the parse that acts on it.
  Without it: `fairseq-train --help --user-dir fairseq_eva --arch transformer_eva_tiny` lists no attention option.
- quiet_logs: four or five INFO lines of fairseq's iterator caching on every pass over a dataset (`reuse_dataloader
  = True`, `creating new batches for epoch 1`). Without it: any fairseq-train run, or a hub translate call.
- same_attention: fairseq-train resumes or fine-tunes a checkpoint into a model of another attention. Without it: a
  language model trained with --decoder-attention elu resumes under --decoder-attention softmax without a word.
- save_dir: a run that fails before training leaves an empty --save-dir that looks like a run.
  Without it: fairseq-train with a bad option leaves the folder.
- wall_clock: the log's `wall` reads 0 after a resume from a checkpoint saved within an epoch.
  Without it: resume from a --save-interval-updates checkpoint and read `wall`.

`distributed` is not installed: the plugin's models call its `check_launch` when they are built.
"""

from . import (
    batch_limits,
    batching,
    checkpoint_paths,
    checkpoint_safety,
    clean_exit,
    data_dir,
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

INSTALLED = (batch_limits, batching, checkpoint_paths, checkpoint_safety, clean_exit, data_dir, eval_lm_window,
             harmless_warnings, interrupt, model_fit, model_help, quiet_logs, same_attention, save_dir, wall_clock)


def install():
    """Install every workaround (idempotent)."""
    for fix in INSTALLED:
        fix.install()
