"""Errors in what the user gave (an option, a file), and their one-line report on the command line."""

import os
import sys

from hydra.errors import CompactHydraException


class UserError(CompactHydraException):
    """A mistake in what the user gave, whose message says all: fairseq-train and the other argparse tools
    print it as one line (see `report_user_errors`), fairseq-hydra-train prints the message of a
    CompactHydraException without a traceback."""


class AttentionOptionError(UserError, ValueError):
    """A bad attention option (of EVA or of any other mechanism), named as the user wrote it."""


EVAOptionError = AttentionOptionError  # its earlier name


class FP16Error(UserError):
    """fp16 asked for without a CUDA GPU."""


def under_hydra():
    """Whether the options came from hydra (fairseq-hydra-train) rather than a command line of --options."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:
        return False
    return HydraConfig.initialized()


def option(group, key):
    """How the user names fairseq's option `group.key`: `dataset.max_tokens` under fairseq-hydra-train,
    `--max-tokens` on the other tools' command lines."""
    return f"{group}.{key}" if under_hydra() else "--" + key.replace("_", "-")


def task_option(name):
    """`--task NAME`, or `task._name=NAME` under fairseq-hydra-train."""
    return f"task._name={name}" if under_hydra() else f"--task {name}"


def program():
    """The name of the running tool (fairseq-generate, ...), as its one-line errors begin."""
    return os.path.basename(sys.argv[0])


def report_user_errors():
    """Make an uncaught UserError print as one line, `PROG: error: MESSAGE`, as argparse's errors do
    (fairseq's tools meet these long after parsing the command line), and Ctrl-C outside a training step (in
    fairseq-generate, eval-lm, interactive, or while data loads) print `PROG: interrupted` instead of a
    traceback (Python still ends the process by SIGINT: exit status 130); other exceptions are unchanged."""
    previous = sys.excepthook
    if getattr(previous, "reports_user_errors", False):
        return

    def hook(kind, error, traceback):
        if issubclass(kind, UserError):
            print(f"{program()}: error: {error}", file=sys.stderr)
        elif issubclass(kind, KeyboardInterrupt):
            print(f"{program()}: interrupted", file=sys.stderr)
        else:
            previous(kind, error, traceback)

    hook.reports_user_errors = True
    sys.excepthook = hook
