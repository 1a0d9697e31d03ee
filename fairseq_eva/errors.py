"""Errors in what the user gave (an option, a file), and their one-line report on the command line."""

import os
import sys

from hydra.errors import CompactHydraException


class UserError(CompactHydraException):
    """A mistake in what the user gave, whose message says all: fairseq-train and the other argparse tools
    print it as one line (see `report_user_errors`), fairseq-hydra-train prints the message of a
    CompactHydraException without a traceback."""


class FP16Error(UserError):
    """fp16 asked for without a CUDA GPU."""


def report_user_errors():
    """Make an uncaught UserError print as one line, `PROG: error: MESSAGE`, as argparse's errors do
    (fairseq's tools meet these long after parsing the command line); other exceptions are unchanged."""
    previous = sys.excepthook
    if getattr(previous, "reports_user_errors", False):
        return

    def hook(kind, error, traceback):
        if issubclass(kind, UserError):
            print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        else:
            previous(kind, error, traceback)

    hook.reports_user_errors = True
    sys.excepthook = hook
