"""Stop on text that is not UTF-8, naming the file and the line, before a data_prep script writes anything.

    python data_prep/utf8_check.py FILE...

The tools that follow (sacremoses, sentencepiece, subword-nmt, fairseq-preprocess) read UTF-8: given other
bytes (a Latin-1 "Caf\\xe9") they replace them with U+FFFD, cut them into odd pieces or stop with a traceback.
`utf8_lines` gives the same one-line error to the scripts that read standard input (moses.py, mlm_text.py).
"""

import sys

BLOCK = 1 << 24


class NotUtf8(ValueError):
    pass


def _raise_at(name, data, error, first_line):
    before = data[:error.start]
    line, column = first_line + before.count(b"\n"), error.start - before.rfind(b"\n")
    raise NotUtf8(f"{name} line {line} is not UTF-8 (byte 0x{data[error.start]:02x} at byte {column} of the line): "
                  "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line")


def check_file(path):
    """Raise NotUtf8 at the first line of path that is not UTF-8 (read in blocks of whole lines: fast)."""
    line, rest = 1, b""
    with open(path, "rb") as f:
        while True:
            block = f.read(BLOCK)
            data = rest + block
            if block:  # decode whole lines only, so that no character is cut between two blocks
                cut = data.rfind(b"\n") + 1
                data, rest = data[:cut], data[cut:]
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as e:
                _raise_at(path, data, e, line)
            line += data.count(b"\n")
            if not block:
                return


def utf8_lines(stream, name="standard input"):
    """The lines of a binary stream, decoded; NotUtf8 at the first one that is not UTF-8."""
    for n, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            _raise_at(name, raw, e, n)


def main(argv=None):
    try:
        for path in sys.argv[1:] if argv is None else argv:
            check_file(path)
    except NotUtf8 as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
