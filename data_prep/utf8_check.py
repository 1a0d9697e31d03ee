"""Stop on text that is not UTF-8, naming the file and the line, before a data_prep script writes anything.

    python data_prep/utf8_check.py FILE...

The tools that follow (sacremoses, sentencepiece, subword-nmt, fairseq-preprocess) read UTF-8: given other
bytes (a Latin-1 "Caf\\xe9") they replace them with U+FFFD, cut them into odd pieces or stop with a traceback.
`checked_lines` gives the same one-line error to the tools that read standard input (moses.py, mlm_text.py),
before they write a line.
"""

import sys
import tempfile

BLOCK = 1 << 24


class NotUtf8(ValueError):
    pass


def _raise_at(name, data, error, first_line):
    before = data[:error.start]
    line, column = first_line + before.count(b"\n"), error.start - before.rfind(b"\n")
    raise NotUtf8(f"{name} line {line} is not UTF-8 (byte 0x{data[error.start]:02x} at byte {column} of the line): "
                  "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8 for Latin-1 text) or fix that line")


def check_stream(f, name, copy_to=None):
    """Raise NotUtf8 at the first line of a binary stream that is not UTF-8 (read in blocks of whole lines: fast);
    what was read is also written to `copy_to`, when given."""
    line, rest = 1, b""
    while True:
        block = f.read(BLOCK)
        if copy_to is not None:
            copy_to.write(block)
        data = rest + block
        if block:  # decode whole lines only, so that no character is cut between two blocks
            cut = data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            _raise_at(name, data, e, line)
        line += data.count(b"\n")
        if not block:
            return


def check_file(path):
    """Raise NotUtf8 at the first line of path that is not UTF-8."""
    with open(path, "rb") as f:
        check_stream(f, path)


def checked_lines(stream, name="standard input"):
    """The lines of a binary stream, decoded, once all of it was found to be UTF-8: NotUtf8 comes before the
    first line, so that a tool stopped by it has written nothing. A file is read twice; a pipe is kept in a
    temporary file while it is checked."""
    if stream.seekable():
        start = stream.tell()
        check_stream(stream, name)
        stream.seek(start)
        source = stream
    else:
        source = tempfile.TemporaryFile()
        check_stream(stream, name, copy_to=source)
        source.seek(0)
    return (raw.decode("utf-8") for raw in source)


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
