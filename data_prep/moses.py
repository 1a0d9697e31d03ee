"""Moses pre- and post-processing with sacremoses (the Python port of the Moses perl scripts).

    python data_prep/moses.py tokenize -l en [-a] [-j WORKERS] < raw > tok
    python data_prep/moses.py detokenize -l de < tok > detok

`tokenize` is normalize-punctuation.perl | remove-non-printing-char.perl | tokenizer.perl -no-escape,
as in fairseq's WMT recipes; `-a` turns on aggressive dash splitting ("foo-bar" -> "foo @-@ bar").
"""

import argparse
import sys
from functools import partial
from multiprocessing import Pool

from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
from utf8_check import NotUtf8, checked_lines

_workers = {}


def _tokenize_line(line, lang, aggressive):
    if lang not in _workers:
        _workers[lang] = (
            MosesPunctNormalizer(lang=lang, pre_replace_unicode_punct=True, post_remove_control_chars=True),
            MosesTokenizer(lang=lang),
        )
    norm, tok = _workers[lang]
    return tok.tokenize(norm.normalize(line.rstrip("\n")), aggressive_dash_splits=aggressive,
                        escape=False, return_str=True).strip()


def tokenize(lines, lang, aggressive=False, workers=1):
    fn = partial(_tokenize_line, lang=lang, aggressive=aggressive)
    if workers <= 1:
        yield from map(fn, lines)
    else:
        with Pool(workers) as pool:
            yield from pool.imap(fn, lines, chunksize=1000)


def detokenize(lines, lang):
    detok = MosesDetokenizer(lang=lang)
    for line in lines:
        yield detok.detokenize(line.split(), unescape=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["tokenize", "detokenize"])
    parser.add_argument("-l", "--lang", required=True)
    parser.add_argument("-a", "--aggressive-dash-splits", action="store_true")
    parser.add_argument("-j", "--workers", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        stdin = checked_lines(sys.stdin.buffer)
    except NotUtf8 as e:
        sys.exit(f"error: {e}")
    out = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    if args.command == "tokenize":
        result = tokenize(stdin, args.lang, args.aggressive_dash_splits, args.workers)
    else:
        result = detokenize(stdin, args.lang)
    for line in result:
        out.write(line + "\n")
    out.flush()


if __name__ == "__main__":
    main()
