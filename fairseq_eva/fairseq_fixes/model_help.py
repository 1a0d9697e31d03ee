"""`--help` with an `--arch` prints the model's options too.

fairseq's `options.parse_args_and_arch` parses the command line once to learn `--arch` and adds the model's options
only then, so argparse acts on `--help` in that first parse and prints none of them: `fairseq-train --help
--user-dir fairseq_eva --arch transformer_eva_tiny` listed no attention option (nor does `--arch transformer`
without the plugin). Without this fix: that command.

fairseq's tools load the `--user-dir` when they make their parser, before they call parse_args_and_arch. Wrapped,
it takes `--help` off the arguments when an `--arch` is given, and the parser prints its help, the model's options
included, at its last parse, then exits as argparse's `--help` does.
"""

import argparse
import functools
import sys


def _helping(parse_args_and_arch):
    @functools.wraps(parse_args_and_arch)
    def wrapper(parser, input_args=None, parse_known=False, *args, **kwargs):
        given = sys.argv[1:] if input_args is None else list(input_args)
        asked = [a for a in given if a in ("-h", "--help")]
        known = argparse.ArgumentParser(add_help=False)
        known.add_argument("--arch", "-a")
        if not asked or parse_known or known.parse_known_args(given)[0].arch is None:
            return parse_args_and_arch(parser, input_args, parse_known, *args, **kwargs)

        def print_help(*_, **__):
            parser.print_help()
            parser.exit()

        parser.parse_args = print_help  # the last parse, once every option is on the parser
        return parse_args_and_arch(parser, [a for a in given if a not in asked], parse_known, *args, **kwargs)

    return wrapper

